//! `TANDEM_PROFILE`: where a GPU graph's device time goes, step by step, inside the model that
//! runs it (the caches, clocks and neighbours of a real run, which a profiler timing each kernel
//! alone does not see).
//!
//! While it is set, a GPU device runs every graph launch by launch (no device graph) and records
//! an event before the first step and after each one; once the graph has finished it adds each
//! step's time (event to event) to a table kept per plan, under the step's label: the
//! registration and the node it computes (a matmul's weight type and shape), a fallback group's
//! first op, a split or staged matmul. After every `n` runs of one plan the table is printed to
//! stderr, heaviest label first, and started again. An event between two kernels keeps the
//! second from starting early (no dependent launch) and adds about a microsecond of its own, so
//! the sum of the steps is somewhat above a replayed graph's `device_us`; the shares are what
//! the table is for.

use super::api::GpuResult;
use super::safe::{Context, Event, Stream};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

/// One label's time over the runs of a table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub launches: u64,
    pub us: f64,
}

/// The runs of one plan since its last table, by plan step (labelled only when printed: a
/// plan's steps keep their labels, so a run adds numbers and builds no strings).
#[derive(Debug, Default)]
struct Table {
    runs: usize,
    steps: HashMap<usize, Row>,
}

/// Events of the graph running and the tables of the plans run so far.
pub struct Profiler {
    every: usize,
    events: Vec<Event>,
    /// The plan step each event after the first closes.
    marks: Vec<usize>,
    /// Events recorded for the graph running.
    recorded: usize,
    tables: HashMap<u64, Table>,
}

impl Profiler {
    /// A profiler printing each plan's table after every `every` (at least 1) runs of it.
    pub fn new(every: usize) -> Profiler {
        Profiler {
            every: every.max(1),
            events: Vec::new(),
            marks: Vec::new(),
            recorded: 0,
            tables: HashMap::new(),
        }
    }

    /// Records the next event: event `i` closes step `marks[i - 1]`, event 0 opens the graph.
    fn record(&mut self, ctx: &Arc<Context>, stream: &Stream) -> GpuResult<()> {
        let i = self.recorded;
        if self.events.len() <= i {
            self.events.push(ctx.event()?);
        }
        self.events[i].record(stream)?;
        self.recorded += 1;
        Ok(())
    }

    /// Before the graph's first step.
    pub fn begin(&mut self, ctx: &Arc<Context>, stream: &Stream) -> GpuResult<()> {
        self.marks.clear();
        self.recorded = 0;
        self.record(ctx, stream)
    }

    /// After plan step `step` is queued.
    pub fn mark(&mut self, ctx: &Arc<Context>, stream: &Stream, step: usize) -> GpuResult<()> {
        self.record(ctx, stream)?;
        self.marks.push(step);
        Ok(())
    }

    /// Once the stream has finished the graph of plan `plan`: adds its steps' times, labelled by
    /// `label(step)`, to the plan's table, and returns the table as text when the plan has run
    /// `every` times since its last one (then starting it again).
    pub fn finish(
        &mut self,
        plan: u64,
        label: impl Fn(usize) -> String,
        header: impl Fn(usize) -> String,
    ) -> GpuResult<Option<String>> {
        let events = &self.events;
        let times = step_times(&self.marks, self.recorded, |i| events[i].elapsed_ms(&events[i + 1]))?;
        self.marks.clear();
        Ok(add_run(&mut self.tables, self.every, plan, times, label, header))
    }
}

/// Each marked step's time in microseconds: step `marks[i]` lasted from event `i` to event
/// `i + 1` (`elapsed(i)`, in milliseconds), for the `recorded` events there are.
fn step_times(
    marks: &[usize],
    recorded: usize,
    mut elapsed: impl FnMut(usize) -> GpuResult<f32>,
) -> GpuResult<Vec<(usize, f64)>> {
    let mut times = Vec::with_capacity(marks.len());
    for (i, &step) in marks.iter().enumerate().take(recorded.saturating_sub(1)) {
        times.push((step, f64::from(elapsed(i)?) * 1e3));
    }
    Ok(times)
}

/// Adds one run's step times to plan `plan`'s table; once the plan has run `every` times since
/// its last table, returns the table as text and starts it again.
fn add_run(
    tables: &mut HashMap<u64, Table>,
    every: usize,
    plan: u64,
    times: Vec<(usize, f64)>,
    label: impl Fn(usize) -> String,
    header: impl Fn(usize) -> String,
) -> Option<String> {
    let table = tables.entry(plan).or_default();
    table.runs += 1;
    for (step, us) in times {
        let row = table.steps.entry(step).or_default();
        row.launches += 1;
        row.us += us;
    }
    if table.runs < every {
        return None;
    }
    let done = std::mem::take(table);
    // Steps of one label (a kernel and shape in every layer) add up under it.
    let mut rows: HashMap<String, Row> = HashMap::new();
    for (step, r) in done.steps {
        let row = rows.entry(label(step)).or_default();
        row.launches += r.launches;
        row.us += r.us;
    }
    Some(format_table(&header(done.runs), done.runs, rows.into_iter().collect()))
}

/// The table of `runs` runs: one line per label, heaviest first, with its microseconds a run,
/// share of the steps' sum, launches a run and microseconds a launch, then the sum.
pub fn format_table(header: &str, runs: usize, mut rows: Vec<(String, Row)>) -> String {
    let runs = runs.max(1) as f64;
    rows.sort_by(|a, b| b.1.us.total_cmp(&a.1.us).then_with(|| a.0.cmp(&b.0)));
    let total: f64 = rows.iter().map(|(_, r)| r.us).sum();
    let launches: u64 = rows.iter().map(|(_, r)| r.launches).sum();
    let mut out = String::new();
    let _ = writeln!(out, "{header}");
    let _ = writeln!(
        out,
        "  {:>9} {:>6} {:>8} {:>8}  step",
        "us/run", "share", "n/run", "us each"
    );
    for (label, r) in &rows {
        let share = if total > 0.0 { 100.0 * r.us / total } else { 0.0 };
        let _ = writeln!(
            out,
            "  {:>9.1} {:>5.1}% {:>8.1} {:>8.2}  {label}",
            r.us / runs,
            share,
            r.launches as f64 / runs,
            r.us / r.launches.max(1) as f64,
        );
    }
    let _ = write!(
        out,
        "  {:>9.1} {:>5.1}% {:>8.1} {:>8}  (all steps)",
        total / runs,
        100.0,
        launches as f64 / runs,
        ""
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(launches: u64, us: f64) -> Row {
        Row { launches, us }
    }

    #[test]
    fn table_lists_the_heaviest_step_first_with_per_run_figures() {
        let rows = vec![
            ("hip.rope ROPE".to_string(), row(64, 320.0)),
            ("hip.gemv MUL_MAT q4_0 4096x14336".to_string(), row(32, 1600.0)),
            ("cpu fallback TOP_K".to_string(), row(2, 80.0)),
        ];
        let t = format_table("profile", 2, rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "profile");
        assert!(lines[2].ends_with("hip.gemv MUL_MAT q4_0 4096x14336"), "{t}");
        // 1600 us over 2 runs, 80 % of 2000, 16 launches a run of 50 us each.
        assert!(lines[2].contains("800.0") && lines[2].contains("80.0%"), "{t}");
        assert!(lines[2].contains("16.0") && lines[2].contains("50.00"), "{t}");
        assert!(
            lines[3].ends_with("hip.rope ROPE") && lines[4].ends_with("cpu fallback TOP_K"),
            "{t}"
        );
        assert!(
            lines[5].contains("1000.0") && lines[5].contains("49.0") && lines[5].ends_with("(all steps)"),
            "{t}"
        );
    }

    #[test]
    fn step_i_lasts_from_event_i_to_the_next() {
        // Event 0 opens the graph; steps 3, 5 and 7 were marked, so events 1..=3 close them.
        let mut asked = Vec::new();
        let t = step_times(&[3, 5, 7], 4, |i| {
            asked.push(i);
            Ok([0.010, 0.020, 0.005][i])
        })
        .unwrap();
        assert_eq!(asked, [0, 1, 2]);
        let steps: Vec<usize> = t.iter().map(|x| x.0).collect();
        assert_eq!(steps, [3, 5, 7]);
        assert!((t[0].1 - 10.0).abs() < 1e-3 && (t[1].1 - 20.0).abs() < 1e-3 && (t[2].1 - 5.0).abs() < 1e-3);
        // A run cut short (fewer events than marks + 1) reads only the events there are.
        assert_eq!(step_times(&[3, 5], 2, |_| Ok(1.0)).unwrap().len(), 1);
        assert!(step_times(&[3], 0, |_| Ok(1.0)).unwrap().is_empty());
    }

    #[test]
    fn a_table_comes_every_n_runs_of_a_plan_and_starts_again() {
        let mut tables = HashMap::new();
        let label = |step: usize| format!("step {step}");
        let header = |runs: usize| format!("{runs} runs");
        let run = |tables: &mut HashMap<u64, Table>, plan: u64| {
            add_run(tables, 2, plan, vec![(1, 4.0), (2, 6.0)], label, header)
        };
        assert!(run(&mut tables, 7).is_none());
        // Another plan's runs count apart.
        assert!(run(&mut tables, 8).is_none());
        let t = run(&mut tables, 7).expect("the second run of plan 7 prints its table");
        assert!(t.starts_with("2 runs\n"), "{t}");
        // Per run: step 2 takes 6 us, one launch.
        let line = t.lines().find(|l| l.ends_with("step 2")).unwrap();
        assert!(
            line.contains("6.0") && line.contains("60.0%") && line.contains("1.0"),
            "{t}"
        );
        assert!(run(&mut tables, 7).is_none(), "the table starts again");
        assert!(run(&mut tables, 8).is_some());
    }

    #[test]
    fn steps_of_one_label_add_up_under_it() {
        let mut tables = HashMap::new();
        let same = |_: usize| "hip.gemv".to_string();
        let t = add_run(&mut tables, 1, 1, vec![(1, 4.0), (5, 6.0)], same, |_| "h".into()).unwrap();
        assert_eq!(t.lines().filter(|l| l.ends_with("hip.gemv")).count(), 1, "{t}");
        let line = t.lines().find(|l| l.ends_with("hip.gemv")).unwrap();
        assert!(
            line.contains("10.0") && line.contains("2.0") && line.contains("5.00"),
            "{t}"
        );
    }

    #[test]
    fn empty_table_has_no_share_of_nothing() {
        let t = format_table("h", 0, Vec::new());
        assert!(t.ends_with("(all steps)") && t.contains("0.0"), "{t}");
        assert!(!t.contains("NaN"), "{t}");
    }
}
