//! Medians, percentiles, ratios and Markdown tables.

use std::fmt::Write as _;

/// A distribution of samples (nearest-rank percentiles).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dist {
    /// Samples.
    pub n: usize,
    /// Smallest sample.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

/// The nearest-rank `p`-th percentile (`p` in 0..=100) of sorted samples.
#[must_use]
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Dist {
    /// The distribution of `samples` (NaN everywhere for no samples).
    #[must_use]
    pub fn of(samples: impl IntoIterator<Item = f64>) -> Dist {
        let mut v: Vec<f64> = samples.into_iter().filter(|x| !x.is_nan()).collect();
        v.sort_by(f64::total_cmp);
        Dist {
            n: v.len(),
            min: v.first().copied().unwrap_or(f64::NAN),
            p50: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            p99: percentile(&v, 99.0),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// The median of `samples`.
#[must_use]
pub fn median(samples: impl IntoIterator<Item = f64>) -> f64 {
    Dist::of(samples).p50
}

/// `a / b`, formatted as `1.23×` (or `–` when `b` is zero or either is NaN).
#[must_use]
pub fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 || a.is_nan() || b.is_nan() {
        "–".to_owned()
    } else {
        format!("{:.2}×", a / b)
    }
}

/// A number with `decimals` decimals (`–` for NaN).
#[must_use]
pub fn num(x: f64, decimals: usize) -> String {
    if x.is_nan() {
        "–".to_owned()
    } else {
        format!("{x:.decimals$}")
    }
}

/// A Markdown table with a title and notes.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Shown as a `###` heading.
    pub title: String,
    /// Column headings.
    pub head: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

impl Table {
    /// An empty table.
    #[must_use]
    pub fn new(title: &str, head: &[&str]) -> Table {
        Table {
            title: title.to_owned(),
            head: head.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Adds a note.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The table as Markdown.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "### {}\n", self.title);
        let _ = writeln!(out, "| {} |", self.head.join(" | "));
        let _ = writeln!(
            out,
            "|{}",
            self.head.iter().map(|_| "---|").collect::<String>()
        );
        for r in &self.rows {
            let _ = writeln!(out, "| {} |", r.join(" | "));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                let _ = writeln!(out, "{n}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let d = Dist::of((1..=100).map(f64::from));
        assert_eq!(
            (d.p50, d.p90, d.p99, d.max, d.min),
            (50.0, 90.0, 99.0, 100.0, 1.0)
        );
        assert_eq!(Dist::of([3.0]).p99, 3.0);
        assert!(Dist::of([]).p50.is_nan());
        assert_eq!(ratio(2.0, 1.0), "2.00×");
        assert_eq!(ratio(1.0, 0.0), "–");
    }
}
