//! Placeholders for statements whose number of parameters is known only at run time.

use crate::Backend;

/// Bind placeholders, written in the order the values are bound, each used once. SQLite gets
/// anonymous `?`: it resolves every numbered or named parameter by a linear search of those seen
/// so far, which makes a statement with thousands of them quadratic to prepare and bind.
pub(crate) struct Params {
    backend: Backend,
    count: usize,
}

impl Params {
    pub(crate) fn new(backend: Backend) -> Self {
        Self { backend, count: 0 }
    }

    pub(crate) fn one(&mut self) -> String {
        self.count += 1;
        match self.backend {
            Backend::Postgres => format!("${}", self.count),
            Backend::Sqlite => "?".to_owned(),
        }
    }

    pub(crate) fn many(&mut self, n: usize) -> String {
        (0..n).map(|_| self.one()).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::Params;
    use crate::Backend;

    #[test]
    fn placeholders_follow_the_backend() {
        let mut pg = Params::new(Backend::Postgres);
        assert_eq!(pg.one(), "$1");
        assert_eq!(pg.many(3), "$2, $3, $4");
        let mut lite = Params::new(Backend::Sqlite);
        assert_eq!(lite.one(), "?");
        assert_eq!(lite.many(2), "?, ?");
    }
}
