//! Durations as operators write them in YAML: `90s`, `15m`, `168h`, `14d`, `1h30m`.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use serde::Deserializer;
use serde::Serialize;
use serde::Serializer;

/// A non-negative duration parsed from a human string. Units: `ms`, `s`, `m`, `h`, `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ConfigDuration(pub std::time::Duration);

impl ConfigDuration {
    /// From whole seconds.
    pub const fn from_secs(secs: u64) -> Self {
        Self(std::time::Duration::from_secs(secs))
    }

    /// The std duration.
    pub fn std(self) -> std::time::Duration {
        self.0
    }

    /// As a `time::Duration` (saturating).
    pub fn time(self) -> time::Duration {
        time::Duration::try_from(self.0).unwrap_or(time::Duration::MAX)
    }
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}: write a number and a unit, e.g. 500ms, 30s, 15m, 168h, 14d")]
pub struct DurationError(String);

impl FromStr for ConfigDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || DurationError(s.to_owned());
        let text = s.trim();
        if text.is_empty() {
            return Err(err());
        }
        let mut total: u128 = 0;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(err());
            }
            let value: u128 = rest[..digits].parse().map_err(|_| err())?;
            rest = &rest[digits..];
            let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            let nanos_per_unit: u128 = match &rest[..unit_len] {
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60 * 1_000_000_000,
                "h" => 3_600 * 1_000_000_000,
                "d" => 86_400 * 1_000_000_000,
                _ => return Err(err()),
            };
            rest = &rest[unit_len..];
            total = value
                .checked_mul(nanos_per_unit)
                .and_then(|n| total.checked_add(n))
                .ok_or_else(err)?;
        }
        let secs = u64::try_from(total / 1_000_000_000).map_err(|_| err())?;
        // The remainder of a division by 1e9 always fits in u32.
        let nanos = (total % 1_000_000_000) as u32;
        Ok(Self(std::time::Duration::new(secs, nanos)))
    }
}

impl fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() != 0 {
            return write!(f, "{}ms", d.as_millis());
        }
        let s = d.as_secs();
        if s != 0 && s.is_multiple_of(86_400) {
            write!(f, "{}d", s / 86_400)
        } else if s != 0 && s.is_multiple_of(3_600) {
            write!(f, "{}h", s / 3_600)
        } else if s != 0 && s.is_multiple_of(60) {
            write!(f, "{}m", s / 60)
        } else {
            write!(f, "{s}s")
        }
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Written as [`Display`](fmt::Display) writes it, which parses back to the same duration (a
/// sub-second duration is whole milliseconds, the finest unit a file can state).
impl Serialize for ConfigDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_compounds() {
        assert_eq!(
            "168h".parse::<ConfigDuration>().unwrap(),
            ConfigDuration::from_secs(168 * 3600)
        );
        assert_eq!(
            "1h30m".parse::<ConfigDuration>().unwrap(),
            ConfigDuration::from_secs(5400)
        );
        assert_eq!(
            "14d".parse::<ConfigDuration>().unwrap(),
            ConfigDuration::from_secs(14 * 86400)
        );
        assert_eq!(
            "50ms".parse::<ConfigDuration>().unwrap().std().as_millis(),
            50
        );
        for bad in [
            "",
            "h",
            "10",
            "10x",
            "-5s",
            "1.5h",
            "99999999999999999999999d",
        ] {
            assert!(bad.parse::<ConfigDuration>().is_err(), "{bad}");
        }
        assert_eq!(ConfigDuration::from_secs(7 * 86400).to_string(), "7d");
        assert_eq!(ConfigDuration::from_secs(90).to_string(), "90s");
    }
}
