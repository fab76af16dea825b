//! How results are grouped for the report and the chart: by case (a scenario at a
//! concurrency), then by server. A leaf shared by both, so that neither imports the other's
//! internals.

use std::collections::BTreeMap;

use crate::cli::Scenario;
use crate::run::RunResult;
use crate::stats::Spread;

/// One measured configuration: a scenario at a concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Case {
    pub(crate) scenario: ScenarioOrder,
    pub(crate) concurrency: usize,
}

/// Scenarios in the order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum ScenarioOrder {
    Full,
    NewAccount,
    NewOrder,
    Scale,
}

impl From<Scenario> for ScenarioOrder {
    fn from(scenario: Scenario) -> Self {
        match scenario {
            Scenario::Full => Self::Full,
            Scenario::NewAccount => Self::NewAccount,
            Scenario::NewOrder => Self::NewOrder,
            Scenario::Scale => Self::Scale,
        }
    }
}

impl Case {
    pub(crate) fn title(self) -> String {
        let name = match self.scenario {
            ScenarioOrder::Full => "full issuance",
            ScenarioOrder::NewAccount => "new-account",
            ScenarioOrder::NewOrder => "new-order",
            ScenarioOrder::Scale => "scale",
        };
        format!("{name}, {} concurrent", self.concurrency)
    }
}

/// Results by case, then by server label, one per round.
pub(crate) type Grouped = BTreeMap<Case, BTreeMap<String, Vec<RunResult>>>;

/// A label as a column or legend title: `pebble` becomes `Pebble`.
pub(crate) fn display(label: &str) -> String {
    let mut chars = label.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The spread of one figure over a server's runs of a case; `None` without runs or values.
pub(crate) fn spread(
    runs: Option<&Vec<RunResult>>,
    figure: impl Fn(&RunResult) -> Option<f64>,
) -> Option<Spread> {
    let values: Vec<f64> = runs?.iter().filter_map(figure).collect();
    Spread::of(&values)
}

/// A run's rate until its first stall, for the runs set aside.
pub(crate) fn before_stall_rate(run: &RunResult) -> Option<f64> {
    run.before_stall.as_ref().map(|b| b.flows_per_s)
}
