//! The one table printer of `certeasy admin`: a header and rows of cells, aligned into columns
//! by `tabwriter` (two spaces between columns). An empty cell is shown as `-`, so every row has
//! as many columns as the header and a column is never mistaken for its neighbour.

use std::io::Write;

/// Rows collected under a header, printed with [`Table::print`].
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: impl IntoIterator<Item = String>) {
        self.rows.push(cells.into_iter().collect());
    }

    /// The aligned text, every line ending in a newline.
    pub fn render(&self) -> std::io::Result<String> {
        let mut tw = tabwriter::TabWriter::new(Vec::new()).padding(2);
        for line in std::iter::once(&self.header).chain(&self.rows) {
            let cells: Vec<String> = line
                .iter()
                .map(|c| {
                    if c.is_empty() {
                        "-".to_owned()
                    } else {
                        // A tab or newline inside a cell would shift every column after it.
                        c.replace(['\t', '\n', '\r'], " ")
                    }
                })
                .collect();
            writeln!(tw, "{}", cells.join("\t"))?;
        }
        tw.flush()?;
        let bytes = tw
            .into_inner()
            .map_err(|e| std::io::Error::new(e.error().kind(), e.error().to_string()))?;
        String::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    pub fn print(&self) -> std::io::Result<()> {
        std::io::stdout().write_all(self.render()?.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn columns_are_aligned_and_empty_cells_dashed() {
        let mut t = Table::new(&["ID", "NAMES"]);
        t.row(["7".to_owned(), "a.example".to_owned()]);
        t.row(["1234".to_owned(), String::new()]);
        assert_eq!(
            t.render().unwrap(),
            "ID    NAMES\n7     a.example\n1234  -\n"
        );
    }
}
