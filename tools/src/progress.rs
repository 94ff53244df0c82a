//! Progress of long runs (test-ops, perf-ops, kernels --build) on stderr, so that stdout keeps
//! only results: a bar where stderr is a terminal, otherwise a plain line such as
//! `test-ops: 1200/2835 cases, 41 s` at most every [`PLAIN_EVERY`] and a last one at the end.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Time between two plain progress lines: often enough that a CI log shows the run is alive,
/// seldom enough that a 90 s host run prints a handful.
pub const PLAIN_EVERY: Duration = Duration::from_secs(15);

pub struct Progress {
    label: &'static str,
    unit: &'static str,
    total: usize,
    done: usize,
    start: Instant,
    last_line: Instant,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar on a terminal, plain lines elsewhere; nothing at all for `total == 0`.
    pub fn new(label: &'static str, unit: &'static str, total: usize) -> Progress {
        let bar = (std::io::stderr().is_terminal() && total > 0).then(|| {
            let bar = ProgressBar::new(total as u64);
            let style = ProgressStyle::with_template(&format!(
                "{label}: {{bar:30}} {{pos}}/{{len}} {unit} ({{elapsed}}, about {{eta}} left) {{wide_msg}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        let now = Instant::now();
        Progress {
            label,
            unit,
            total,
            done: 0,
            start: now,
            last_line: now,
            bar,
        }
    }

    /// Prints a result line on stdout without tearing the bar.
    pub fn println(&self, line: &str) {
        self.suspend(|| println!("{line}"));
    }

    /// Runs `f` (which prints) with the bar hidden.
    pub fn suspend(&self, f: impl FnOnce()) {
        match &self.bar {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// One more item done; `what` names it (shown beside the bar).
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        match &self.bar {
            Some(b) => {
                b.set_message(what.to_string());
                b.inc(1);
            }
            None => {
                if self.last_line.elapsed() >= PLAIN_EVERY && self.done < self.total {
                    self.last_line = Instant::now();
                    eprintln!("{}", self.line());
                }
            }
        }
    }

    /// `test-ops: 1200/2835 cases, 41 s`.
    fn line(&self) -> String {
        format!(
            "{}: {}/{} {}, {:.0} s",
            self.label,
            self.done,
            self.total,
            self.unit,
            self.start.elapsed().as_secs_f64()
        )
    }

    /// Clears the bar; a plain run that printed progress says where it ended.
    pub fn finish(self) {
        match &self.bar {
            Some(b) => b.finish_and_clear(),
            None => {
                if self.last_line != self.start {
                    eprintln!("{}", self.line());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_count_and_time() {
        let mut p = Progress::new("test-ops", "cases", 3);
        p.step("a");
        p.step("b");
        assert_eq!(p.done, 2);
        assert!(p.line().starts_with("test-ops: 2/3 cases, "), "{}", p.line());
        p.finish();
    }
}
