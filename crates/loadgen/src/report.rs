//! `report`: medians over rounds, the comparison table and the chart.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use anyhow::bail;

use crate::chart;
use crate::cli::ReportArgs;
use crate::flows::Phase;
use crate::run::RunResult;
use crate::stats::Spread;

use crate::cases::Case;
use crate::cases::Grouped;
use crate::cases::ScenarioOrder;
use crate::cases::before_stall_rate;
use crate::cases::display;
use crate::cases::spread;

/// Reads every `*.json` of `dir`.
pub(crate) fn load(dir: &Path) -> anyhow::Result<Grouped> {
    let mut grouped = Grouped::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let result: RunResult =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let case = Case {
            scenario: result.scenario.into(),
            concurrency: result.concurrency,
        };
        grouped
            .entry(case)
            .or_default()
            .entry(result.label.clone())
            .or_default()
            .push(result);
    }
    Ok(grouped)
}

/// `median (min–max)`, or `median` alone for one round; `–` when absent.
pub(crate) fn cell(spread: Option<Spread>, decimals: usize) -> String {
    match spread {
        None => "–".to_owned(),
        Some(s) if s.n == 1 => format!("{:.decimals$}", s.median),
        Some(s) => format!(
            "{:.decimals$} ({:.decimals$}–{:.decimals$})",
            s.median, s.min, s.max
        ),
    }
}

/// `subject / baseline` of the medians.
pub(crate) fn ratio(subject: Option<Spread>, baseline: Option<Spread>) -> String {
    match (subject, baseline) {
        (Some(s), Some(b)) if b.median > 0.0 => format!("**{:.2}**", s.median / b.median),
        _ => "–".to_owned(),
    }
}

type Figure = (&'static str, usize, fn(&RunResult) -> Option<f64>);

/// The figures of each case's rows: name, decimals, how to read it from a run.
fn figures(scenario: ScenarioOrder) -> Vec<Figure> {
    let mut rows: Vec<Figure> = vec![
        ("flows/s", 1, |r| Some(r.flows_per_s)),
        ("p50 ms", 1, |r| Some(r.latency_ms.p50)),
    ];
    if scenario == ScenarioOrder::Full {
        rows.push(("p90 ms", 1, |r| Some(r.latency_ms.p90)));
    }
    rows.push(("p99 ms", 1, |r| Some(r.latency_ms.p99)));
    if scenario == ScenarioOrder::Full {
        rows.push(("stalls", 0, |r| Some(r.stalls as f64)));
        rows.push(("errors", 0, |r| Some(r.errors as f64)));
        rows.push(("server CPU ms / issuance", 2, |r| {
            r.server.as_ref().map(|s| s.cpu_ms_per_flow)
        }));
        rows.push(("server peak RSS MiB", 1, |r| {
            r.server.as_ref().map(|s| s.vmhwm_kib as f64 / 1024.0)
        }));
    } else {
        rows.push(("errors + stalls", 0, |r| Some((r.errors + r.stalls) as f64)));
    }
    rows
}

/// The markdown of the comparison (without the scale scenario).
pub(crate) fn comparison_table(grouped: &Grouped, baseline: &str, subject: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| scenario | figure | {} | {} | {} / {} |",
        display(baseline),
        display(subject),
        display(subject),
        display(baseline)
    );
    md.push_str("|---|---|---:|---:|---:|\n");
    for (case, by_label) in grouped {
        if case.scenario == ScenarioOrder::Scale {
            continue;
        }
        for (figure, decimals, read) in figures(case.scenario) {
            let b = spread(by_label.get(baseline), read);
            let s = spread(by_label.get(subject), read);
            let _ = writeln!(
                md,
                "| {} | {figure} | {} | {} | {} |",
                case.title(),
                cell(b, decimals),
                cell(s, decimals),
                ratio(s, b)
            );
        }
    }
    md
}

/// For each case in which a server has no clean run but runs set aside: its rate until the first
/// stall (medians over those runs), against the other servers' clean flows/s. `None` when no
/// such case exists.
pub(crate) fn before_stall_table(clean: &Grouped, stalled: &Grouped) -> Option<String> {
    let mut md = String::new();
    for (case, by_label) in stalled {
        for (label, runs) in by_label {
            if clean
                .get(case)
                .is_some_and(|c| c.get(label).is_some_and(|r| !r.is_empty()))
            {
                continue;
            }
            let Some(before) = spread(Some(runs), before_stall_rate) else {
                continue;
            };
            let seconds = spread(Some(runs), |r| r.before_stall.as_ref().map(|b| b.seconds));
            for (other, other_runs) in clean.get(case).into_iter().flatten() {
                if other == label {
                    continue;
                }
                let theirs = spread(Some(other_runs), |r| Some(r.flows_per_s));
                let _ = writeln!(
                    md,
                    "| {} | {} until its first stall ({} set-aside runs; {} s each) | {} | {} | {} |",
                    case.title(),
                    display(label),
                    runs.len(),
                    cell(seconds, 1),
                    cell(Some(before), 1),
                    cell(theirs, 1),
                    ratio(theirs, Some(before)),
                );
            }
        }
    }
    (!md.is_empty()).then(|| {
        format!(
            "A server with no clean run of a case, measured until its first stall instead (the flows that \
             ended before the first stalled flow began, the ramp-up to the first end left out): \
             its rate while it still answered, an upper bound of its figure for the case.\n\n\
             | scenario | measured | flows/s | other server's clean flows/s | other / this |\n\
             |---|---|---:|---:|---:|\n{md}"
        )
    })
}

/// Per-phase latency of the full issuance: medians over rounds of each round's p50/p90/p99.
pub(crate) fn phase_table(grouped: &Grouped, baseline: &str, subject: &str) -> String {
    let mut md = String::new();
    let (b, s) = (display(baseline), display(subject));
    let _ = writeln!(
        md,
        "| full issuance | phase | {b} p50 | {b} p90 | {b} p99 | {s} p50 | {s} p90 | {s} p99 |"
    );
    md.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (case, by_label) in grouped {
        if case.scenario != ScenarioOrder::Full {
            continue;
        }
        for phase in Phase::ALL {
            let mut row = format!("| {} concurrent | {} |", case.concurrency, phase.name());
            for label in [baseline, subject] {
                for pick in [0, 1, 2] {
                    let value = spread(by_label.get(label), |r| {
                        r.phases_ms.get(phase.name()).map(|l| match pick {
                            0 => l.p50,
                            1 => l.p90,
                            _ => l.p99,
                        })
                    });
                    let _ = write!(
                        row,
                        " {} |",
                        value.map_or_else(|| "–".to_owned(), |v| format!("{:.1}", v.median))
                    );
                }
            }
            md.push_str(&row);
            md.push('\n');
        }
    }
    md
}

/// The scale scenario's figures for every label that ran it.
pub(crate) fn scale_table(grouped: &Grouped) -> Option<String> {
    let mut md = String::from(
        "| server | accounts | accounts/s | orders | orders/s | peak RSS (VmHWM) MiB | RSS after (VmRSS) MiB |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut any = false;
    for (case, by_label) in grouped {
        if case.scenario != ScenarioOrder::Scale {
            continue;
        }
        for (label, runs) in by_label {
            for run in runs {
                let (Some(scale), Some(server)) = (&run.scale, &run.server) else {
                    continue;
                };
                any = true;
                let _ = writeln!(
                    md,
                    "| {} (round {}) | {} | {:.1} | {} | {:.1} | {:.1} | {:.1} |",
                    display(label),
                    run.round,
                    scale.accounts,
                    scale.accounts_per_s,
                    scale.orders,
                    scale.orders_per_s,
                    server.vmhwm_kib as f64 / 1024.0,
                    server.vmrss_kib as f64 / 1024.0
                );
            }
        }
    }
    any.then_some(md)
}

/// Replaces what lies between the begin and end markers of `text`.
pub(crate) fn insert_between_markers(
    text: &str,
    marker: &str,
    content: &str,
) -> anyhow::Result<String> {
    let begin = format!("<!-- {marker}:begin -->");
    let end = format!("<!-- {marker}:end -->");
    let Some(start) = text.find(&begin) else {
        bail!("no {begin} marker");
    };
    let after_begin = start + begin.len();
    let Some(stop) = text[after_begin..].find(&end).map(|i| i + after_begin) else {
        bail!("no {end} marker after {begin}");
    };
    Ok(format!(
        "{}\n{}\n{}",
        &text[..after_begin],
        content.trim_end(),
        &text[stop..]
    ))
}

pub(crate) fn report(args: &ReportArgs) -> anyhow::Result<()> {
    let grouped = load(&args.results)?;
    if grouped.is_empty() {
        bail!("no results in {}", args.results.display());
    }
    let mut md = match &args.preamble {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        None => String::new(),
    };
    let comparison = comparison_table(&grouped, &args.baseline, &args.subject);
    if comparison.lines().count() > 2 {
        md.push_str(&comparison);
        if grouped.keys().any(|c| c.scenario == ScenarioOrder::Full) {
            md.push('\n');
            md.push_str(&phase_table(&grouped, &args.baseline, &args.subject));
        }
    }
    let stalled = match args.stalled.as_deref().filter(|d| d.is_dir()) {
        Some(dir) => Some(load(dir)?),
        None => None,
    };
    if let Some(table) = stalled
        .as_ref()
        .and_then(|stalled| before_stall_table(&grouped, stalled))
    {
        md.push('\n');
        md.push_str(&table);
    }
    if let Some(scale) = scale_table(&grouped) {
        if !md.is_empty() && !md.ends_with("\n\n") {
            md.push('\n');
        }
        md.push_str(&scale);
    }
    std::fs::write(&args.markdown, &md)
        .with_context(|| format!("writing {}", args.markdown.display()))?;
    if let Some(path) = &args.chart {
        chart::draw(
            &grouped,
            stalled.as_ref(),
            &args.baseline,
            &args.subject,
            &args.font,
            path,
        )?;
    }
    if let Some(doc) = &args.insert_into {
        let text = std::fs::read_to_string(doc)?;
        std::fs::write(doc, insert_between_markers(&text, &args.marker, &md)?)?;
    }
    print!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::Case;
    use super::Grouped;
    use super::ScenarioOrder;
    use super::before_stall_table;
    use super::cell;
    use super::comparison_table;
    use super::insert_between_markers;
    use crate::cli::Scenario;
    use crate::run::BeforeStall;
    use crate::run::RunResult;
    use crate::stats::Latency;
    use crate::stats::Spread;

    fn result(label: &str, round: u32, flows_per_s: f64) -> RunResult {
        RunResult {
            label: label.to_owned(),
            round,
            scenario: Scenario::NewAccount,
            concurrency: 32,
            directories: Vec::new(),
            started_unix_s: 0,
            flows: 10,
            errors: 0,
            stalls: 0,
            error_samples: Vec::new(),
            wall_s: 1.0,
            flows_per_s,
            polls_per_flow: 0.0,
            poll_ms: 5,
            stall_after_s: 30.0,
            latency_ms: Latency::of(vec![2.0, 4.0]),
            phases_ms: BTreeMap::new(),
            server: None,
            scale: None,
            before_stall: None,
        }
    }

    #[test]
    fn table_has_medians_spreads_and_ratios() {
        let mut grouped = Grouped::new();
        let case = Case {
            scenario: ScenarioOrder::NewAccount,
            concurrency: 32,
        };
        let labels = grouped.entry(case).or_default();
        labels.insert(
            "pebble".to_owned(),
            vec![
                result("pebble", 1, 100.0),
                result("pebble", 2, 120.0),
                result("pebble", 3, 80.0),
            ],
        );
        labels.insert(
            "certeasy".to_owned(),
            vec![
                result("certeasy", 1, 250.0),
                result("certeasy", 2, 190.0),
                result("certeasy", 3, 200.0),
            ],
        );
        let md = comparison_table(&grouped, "pebble", "certeasy");
        assert!(
            md.starts_with("| scenario | figure | Pebble | Certeasy | Certeasy / Pebble |\n"),
            "{md}"
        );
        assert!(
            md.contains("| new-account, 32 concurrent | flows/s | 100.0 (80.0–120.0) | 200.0 (190.0–250.0) | **2.00** |"),
            "{md}"
        );
        assert!(md.contains("| p50 ms | 2.0 (2.0–2.0) |"), "{md}");
    }

    /// A server whose every run of a case stalled is measured against its rate until the first
    /// stall; a server with a clean run of a case is not, whatever its set-aside runs.
    #[test]
    fn a_case_with_only_stalled_runs_is_compared_with_its_rate_before_the_stall() {
        let case = Case {
            scenario: ScenarioOrder::NewAccount,
            concurrency: 32,
        };
        let stalled_run = |label: &str, round, rate| RunResult {
            stalls: 5,
            before_stall: Some(BeforeStall {
                flows: 300,
                seconds: 1.5,
                flows_per_s: rate,
            }),
            ..result(label, round, 40.0)
        };
        let mut clean = Grouped::new();
        clean.entry(case).or_default().insert(
            "certeasy".to_owned(),
            vec![result("certeasy", 1, 600.0), result("certeasy", 2, 640.0)],
        );
        let mut stalled = Grouped::new();
        let set_aside = stalled.entry(case).or_default();
        set_aside.insert(
            "pebble".to_owned(),
            vec![
                stalled_run("pebble", 1, 300.0),
                stalled_run("pebble", 1, 200.0),
                stalled_run("pebble", 2, 250.0),
            ],
        );
        let md = before_stall_table(&clean, &stalled).unwrap();
        assert!(
            md.contains("| new-account, 32 concurrent | Pebble until its first stall (3 set-aside runs; 1.5 (1.5–1.5) s each) | 250.0 (200.0–300.0) | 620.0 (600.0–640.0) | **2.48** |"),
            "{md}"
        );
        // Once the server has a clean run, its set-aside runs say nothing more.
        clean
            .get_mut(&case)
            .unwrap()
            .insert("pebble".to_owned(), vec![result("pebble", 3, 310.0)]);
        assert!(before_stall_table(&clean, &stalled).is_none());
    }

    #[test]
    fn cells() {
        assert_eq!(cell(None, 1), "–");
        assert_eq!(cell(Spread::of(&[1.25]), 2), "1.25");
    }

    #[test]
    fn markers_are_replaced_and_required() {
        let doc = "a\n<!-- x:begin -->\nold\n<!-- x:end -->\nb\n";
        let new = insert_between_markers(doc, "x", "new\n").expect("markers");
        assert_eq!(new, "a\n<!-- x:begin -->\nnew\n<!-- x:end -->\nb\n");
        assert!(insert_between_markers("no markers", "x", "new").is_err());
    }
}
