//! The YAML configuration loader (`certeasy::config::from_str`), the same strict loader and error
//! reporting `certeasy serve --config` uses.
//!
//! Every refusal must be a located, printable report: it names the file, a column only with a
//! line, a line that exists in the text, and no control character from the file reaches the
//! operator's terminal.
#![no_main]

use certeasy::config::{ConfigError, from_str};
use libfuzzer_sys::fuzz_target;

const SOURCE: &str = "fuzz.yaml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let error = match from_str(text, SOURCE) {
        Ok(_) => return,
        Err(error) => error,
    };
    let ConfigError::Invalid {
        source_name,
        problems,
    } = &error
    else {
        panic!("parsing text reported a read error: {error}");
    };
    assert_eq!(source_name, SOURCE);
    assert!(!problems.is_empty(), "a refusal without a problem");
    // serde-saphyr counts lines like YAML does (a lone CR ends a line too); `lines()` does not.
    let max_line = 1 + text.matches(['\n', '\r']).count() as u64;
    for problem in problems {
        assert_eq!(problem.source_name, SOURCE);
        assert_eq!(problem.line.is_some(), problem.column.is_some());
        if let Some(line) = problem.line {
            assert!((1..=max_line).contains(&line), "line {line} of {max_line}");
        } else {
            assert!(problem.source_line.is_none());
        }
        assert!(!problem.message.is_empty());
    }
    let report = error.to_string();
    assert!(
        !report
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "a control character reached the report: {report:?}"
    );
});
