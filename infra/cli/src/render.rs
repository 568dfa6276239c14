//! Human output: aligned tables, times and durations. Machine output is `--json`, never
//! these.

use std::fmt::Write as _;

/// A table: a header row and rows of cells, right-aligned where the header says so.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<(String, bool)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; a header starting with `>` is right-aligned (numbers).
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers
                .iter()
                .map(|h| match h.strip_prefix('>') {
                    Some(name) => (name.to_string(), true),
                    None => (h.to_string(), false),
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Add a row (missing cells are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Is the table empty?
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, two spaces between columns, no trailing spaces.
    pub fn render(&self) -> String {
        let width = |i: usize| {
            self.rows
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain([self.headers[i].0.chars().count()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.headers.len()).map(width).collect();
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|(h, _)| h.clone()).collect();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (_, right)) in self.headers.iter().enumerate() {
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = widths[i].saturating_sub(cell.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                if *right {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }
}

/// The fields of `ignored`, one a line after `indent`, the most values first:
/// `userIdentity.extra: 4`, then `(other fields): N` for values of fields not named.
pub fn ignored_fields(ignored: &tidemark::model::IgnoredFields, indent: &str) -> String {
    let mut out = String::new();
    for (path, n) in ignored.most_frequent(ignored.fields.len()) {
        let _ = writeln!(out, "{indent}{path}: {n}");
    }
    if ignored.unnamed() > 0 {
        let _ = writeln!(out, "{indent}(other fields): {}", ignored.unnamed());
    }
    out
}

/// A time (ms since the epoch) as RFC 3339 in UTC, to the second.
pub fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

/// A time to the millisecond (for records, where order within a second matters).
pub fn when_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// A duration in ms, short: `850ms`, `42s`, `3m 05s`, `2h 03m`, `4d 01h`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// A progress bar of `len` steps on stderr, labelled `label`; hidden when stderr is not a
/// terminal (pipes, tests, CI logs).
pub fn progress(len: u64, label: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let target = if std::io::stderr().is_terminal() {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    };
    let bar = indicatif::ProgressBar::with_draw_target(Some(len), target);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix:>12} [{bar:30}] {pos}/{len} {elapsed:>4} {wide_msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar
}

/// A spinner on stderr (listing), hidden when stderr is not a terminal.
pub fn spinner(label: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let target = if std::io::stderr().is_terminal() {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    };
    let bar = indicatif::ProgressBar::with_draw_target(None, target);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>12} {spinner} {pos} {wide_msg}")
            .expect("valid template"),
    );
    bar.set_prefix(label.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// The operator running the command: `$USER`, else `unknown`.
pub fn operator() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_right_align_numbers() {
        let mut t = Table::new(&["SOURCE", ">ROWS", "NOTE"]);
        t.row(vec!["orders".into(), "1200".into(), "".into()]);
        t.row(vec!["c".into(), "7".into(), "late".into()]);
        assert_eq!(
            t.render(),
            "SOURCE  ROWS  NOTE\norders  1200\nc          7  late\n"
        );
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(42_000), "42s");
        assert_eq!(duration(185_000), "3m 05s");
        assert_eq!(duration(7_380_000), "2h 03m");
        assert_eq!(duration(90_000_000), "1d 01h");
    }
}
