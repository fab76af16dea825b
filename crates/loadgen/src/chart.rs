//! The flows/s chart: grouped bars, baseline and subject side by side per case.
//!
//! Text is drawn with ab_glyph from a font file given at run time, so the chart does not depend
//! on fontconfig or FreeType being installed.

use std::path::Path;

use anyhow::Context;
use anyhow::anyhow;
use plotters::backend::BitMapBackend;
use plotters::chart::ChartBuilder;
use plotters::chart::SeriesLabelPosition;
use plotters::drawing::IntoDrawingArea;
use plotters::element::Rectangle;
use plotters::element::Text;
use plotters::style::BLACK;
use plotters::style::Color;
use plotters::style::FontStyle;
use plotters::style::IntoFont;
use plotters::style::RGBColor;
use plotters::style::TextStyle;
use plotters::style::WHITE;
use plotters::style::text_anchor::HPos;
use plotters::style::text_anchor::Pos;
use plotters::style::text_anchor::VPos;

use crate::cases::Case;
use crate::cases::Grouped;
use crate::cases::ScenarioOrder;
use crate::cases::before_stall_rate;
use crate::cases::display;
use crate::cases::spread;
use crate::run::RunResult;

const FAMILY: &str = "sans-serif";
const BASELINE_COLOUR: RGBColor = RGBColor(0x8c, 0x8c, 0x8c);
const SUBJECT_COLOUR: RGBColor = RGBColor(0x1f, 0x77, 0xb4);

/// Registers the font under the family name every text style below uses.
fn register(font: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(font).with_context(|| {
        format!(
            "reading the chart font {} (Debian: fonts-dejavu-core)",
            font.display()
        )
    })?;
    // plotters keeps fonts for the life of the process and wants `'static` bytes: leaking the
    // one font this short-lived command loads is the intended use.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{} is not a usable TrueType font", font.display()))
}

fn runs_of<'g>(grouped: &'g Grouped, case: Case, label: &str) -> Option<&'g Vec<RunResult>> {
    grouped.get(&case).and_then(|labels| labels.get(label))
}

/// One bar: the median of the clean runs, or else the median rate until the first stall of the
/// runs set aside (drawn paler, as the report's table gives it), or nothing.
#[derive(Debug, Clone, Copy)]
enum Bar {
    Clean(f64),
    UntilStall(f64),
    Missing,
}

impl Bar {
    fn of(grouped: &Grouped, stalled: Option<&Grouped>, case: Case, label: &str) -> Self {
        if let Some(clean) = spread(runs_of(grouped, case, label), |r| Some(r.flows_per_s)) {
            return Bar::Clean(clean.median);
        }
        stalled
            .and_then(|s| spread(runs_of(s, case, label), before_stall_rate))
            .map_or(Bar::Missing, |s| Bar::UntilStall(s.median))
    }

    fn height(self) -> f64 {
        match self {
            Bar::Clean(v) | Bar::UntilStall(v) => v,
            Bar::Missing => 0.0,
        }
    }

    fn text(self) -> String {
        match self {
            Bar::Clean(v) => format!("{v:.1}"),
            Bar::UntilStall(v) => format!("{v:.1}*"),
            Bar::Missing => "no figure".to_owned(),
        }
    }
}

/// `stalled`: the runs set aside, for the cases in which a server has no clean run.
pub(crate) fn draw(
    grouped: &Grouped,
    stalled: Option<&Grouped>,
    baseline: &str,
    subject: &str,
    font: &Path,
    path: &Path,
) -> anyhow::Result<()> {
    register(font)?;
    let cases: Vec<Case> = grouped
        .keys()
        .copied()
        .filter(|c| c.scenario != ScenarioOrder::Scale)
        .collect();
    if cases.is_empty() {
        return Ok(());
    }
    let bars: Vec<(Bar, Bar)> = cases
        .iter()
        .map(|&c| {
            (
                Bar::of(grouped, stalled, c, baseline),
                Bar::of(grouped, stalled, c, subject),
            )
        })
        .collect();
    let top = bars
        .iter()
        .flat_map(|&(b, s)| [b.height(), s.height()])
        .fold(1.0, f64::max)
        * 1.2;

    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "ACME flows per second: {} and {} (median of rounds)",
                display(subject),
                display(baseline)
            ),
            (FAMILY, 22).into_font(),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..cases.len() as f64, 0.0..top)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_max_light_lines(1)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("flows/s")
        .label_style((FAMILY, 14).into_font())
        .axis_desc_style((FAMILY, 16).into_font())
        .draw()
        .map_err(|e| anyhow!("{e}"))?;

    let value_style =
        TextStyle::from((FAMILY, 13).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (series, (label, colour)) in [(baseline, BASELINE_COLOUR), (subject, SUBJECT_COLOUR)]
        .into_iter()
        .enumerate()
    {
        let offset = if series == 0 { 0.12 } else { 0.5 };
        let rectangles = bars.iter().enumerate().map(|(i, &(b, s))| {
            let bar = if series == 0 { b } else { s };
            let x = i as f64 + offset;
            let fill = match bar {
                Bar::UntilStall(_) => colour.mix(0.4).filled(),
                _ => colour.filled(),
            };
            Rectangle::new([(x, 0.0), (x + 0.38, bar.height())], fill)
        });
        chart
            .draw_series(rectangles)
            .map_err(|e| anyhow!("{e}"))?
            .label(display(label))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
        let values = bars.iter().enumerate().map(|(i, &(b, s))| {
            let bar = if series == 0 { b } else { s };
            Text::new(
                bar.text(),
                (i as f64 + offset + 0.19, bar.height()),
                value_style.clone(),
            )
        });
        chart.draw_series(values).map_err(|e| anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FAMILY, 15).into_font())
        .draw()
        .map_err(|e| anyhow!("{e}"))?;

    if bars
        .iter()
        .any(|&(b, s)| matches!(b, Bar::UntilStall(_)) || matches!(s, Bar::UntilStall(_)))
    {
        let note_style =
            TextStyle::from((FAMILY, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Top));
        chart
            .draw_series(std::iter::once(Text::new(
                "* paler bar: no clean run; the rate until the first stall",
                (cases.len() as f64 - 0.05, top * 0.98),
                note_style,
            )))
            .map_err(|e| anyhow!("{e}"))?;
    }

    // Case names under the axis, centred on each group (the x axis has no numeric labels).
    let name_style =
        TextStyle::from((FAMILY, 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, case) in cases.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        root.draw(&Text::new(case.title(), (x, y + 10), name_style.clone()))
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
