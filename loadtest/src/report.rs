//! `tidemark-load report`: folds the `--json` files of repeated runs into medians, a markdown
//! table for docs/performance.md, a summary JSON, ratios between two servers (or two scenarios of the same
//! server, e.g. `modern/echo`), and one combined plot.
//!
//! Owns: grouping (by scenario and label, in the order first seen), medians, the markdown.
//! Called by: `scripts/bench.sh`, `scripts/compare.sh`.
//! Never: re-measures anything; it only reads reports.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use crate::plot::{self, Curve};
use crate::stats::{human, thousands, RunReport, Series};

/// Counters that describe a run rather than judge it: left out of the correctness column.
const INFORMATIONAL: [&str; 10] = [
    "rejections.",
    "kept_connection_opened",
    "reposts_rejected",
    "calls",
    "executions_by_counter",
    "known_events_replayed",
    "hint_differs_from_own",
    "answers_",
    "server.modern_requests",
    "server.connections_active",
];

/// `values` worth a place in the markdown table (the JSON has them all).
const SHOWN_VALUES: [&str; 4] = ["per_session", "per_100k", "b_minus_a_p50_", "b_minus_a_p99_"];

#[derive(Debug, Serialize)]
pub struct SeriesMedian {
    pub name: String,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

#[derive(Debug, Serialize)]
pub struct Group {
    pub scenario: String,
    pub label: String,
    pub runs: usize,
    /// Median over runs of each throughput figure.
    pub throughput: BTreeMap<String, f64>,
    /// Every run's figure, in run order, so the spread is visible.
    pub throughput_runs: BTreeMap<String, Vec<f64>>,
    pub latency: Vec<SeriesMedian>,
    pub values: BTreeMap<String, f64>,
    /// Summed over runs.
    pub counters: BTreeMap<String, i64>,
    pub ok: bool,
    pub failures: Vec<String>,
    #[serde(skip)]
    curves: Vec<Curve>,
}

pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

pub fn load(files: &[PathBuf]) -> anyhow::Result<Vec<RunReport>> {
    files
        .iter()
        .map(|f| {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", f.display()))
        })
        .collect()
}

/// Scenarios in the order tables list them (others after, as first seen).
const SCENARIO_ORDER: [&str; 7] =
    ["ping", "echo", "modern", "stream", "resume", "migration", "sessions"];

pub fn group(reports: &[RunReport]) -> Vec<Group> {
    let mut order: Vec<(String, String)> = Vec::new();
    for r in reports {
        let key = (r.scenario.clone(), r.label.clone());
        if !order.contains(&key) {
            order.push(key);
        }
    }
    let rank =
        |s: &str| SCENARIO_ORDER.iter().position(|o| *o == s).unwrap_or(SCENARIO_ORDER.len());
    order.sort_by_key(|(scenario, _)| rank(scenario)); // stable: labels keep their first-seen order
    order
        .into_iter()
        .map(|(scenario, label)| {
            let runs: Vec<&RunReport> =
                reports.iter().filter(|r| r.scenario == scenario && r.label == label).collect();
            fold(scenario, label, &runs)
        })
        .collect()
}

fn fold(scenario: String, label: String, runs: &[&RunReport]) -> Group {
    let mut throughput_runs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut values_runs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut counters = BTreeMap::new();
    let mut series_names: Vec<String> = Vec::new();
    let mut failures = Vec::new();
    for r in runs {
        for (k, v) in &r.throughput {
            throughput_runs.entry(k.clone()).or_default().push(*v);
        }
        for (k, v) in &r.values {
            values_runs.entry(k.clone()).or_default().push(*v);
        }
        for (k, v) in &r.counters {
            *counters.entry(k.clone()).or_insert(0) += v;
        }
        for s in &r.latency {
            if !series_names.contains(&s.name) {
                series_names.push(s.name.clone());
            }
        }
        failures.extend(r.failures.iter().cloned());
    }
    let mut latency = Vec::new();
    let mut curves = Vec::new();
    for name in series_names {
        let all: Vec<&Series> =
            runs.iter().flat_map(|r| r.latency.iter().filter(|s| s.name == name)).collect();
        let pick =
            |f: fn(&Series) -> f64| median(&mut all.iter().map(|s| f(s)).collect::<Vec<_>>());
        latency.push(SeriesMedian {
            name: name.clone(),
            p50_us: pick(|s| s.p50_us),
            p90_us: pick(|s| s.p90_us),
            p99_us: pick(|s| s.p99_us),
            p999_us: pick(|s| s.p999_us),
            max_us: pick(|s| s.max_us),
        });
        // The run with the median p99 stands for the group in the plot.
        let mut by_p99: Vec<&&Series> = all.iter().collect();
        by_p99.sort_by(|a, b| a.p99_us.total_cmp(&b.p99_us));
        if let Some(s) = by_p99.get(by_p99.len() / 2) {
            let series = if name == scenario { String::new() } else { format!(" {name}") };
            curves.push(Curve {
                name: format!("{label} {scenario}{series}"),
                points: s.curve.clone(),
            });
        }
    }
    let medians = |m: BTreeMap<String, Vec<f64>>| -> BTreeMap<String, f64> {
        m.into_iter().map(|(k, mut v)| (k, median(&mut v))).collect()
    };
    Group {
        scenario,
        label,
        runs: runs.len(),
        throughput: medians(throughput_runs.clone()),
        throughput_runs,
        latency,
        values: medians(values_runs),
        counters,
        ok: runs.iter().all(|r| r.ok),
        failures,
        curves,
    }
}

fn unit(key: &str) -> String {
    key.replace("_per_s", "/s").replace('_', " ")
}

pub fn markdown(groups: &[Group], ratios: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| scenario | server | runs | throughput (median) | latency | p50 µs | p90 µs | p99 µs | p99.9 µs | correctness |"
    );
    let _ = writeln!(out, "|---|---|---:|---|---|---:|---:|---:|---:|---|");
    for g in groups {
        let mut figures: Vec<String> =
            g.throughput.iter().map(|(k, v)| format!("{} {}", thousands(*v), unit(k))).collect();
        figures.extend(
            g.values
                .iter()
                .filter(|(k, _)| SHOWN_VALUES.iter().any(|shown| k.contains(shown)))
                .map(|(k, v)| format!("{} {}", human(*v), k.replace('_', " "))),
        );
        let nonzero: Vec<String> = g
            .counters
            .iter()
            .filter(|(k, v)| **v != 0 && !INFORMATIONAL.iter().any(|i| k.starts_with(i)))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let verdict = if g.ok && nonzero.is_empty() {
            "all 0".to_owned()
        } else if g.ok {
            nonzero.join(", ")
        } else {
            format!("**FAILED** {}", nonzero.join(", "))
        };
        let rows = g.latency.len().max(1);
        for i in 0..rows {
            let first = i == 0;
            let (name, p) = match g.latency.get(i) {
                Some(s) => (s.name.as_str(), [s.p50_us, s.p90_us, s.p99_us, s.p999_us]),
                None => ("", [f64::NAN; 4]),
            };
            let cell = |v: f64| if v.is_nan() { String::new() } else { format!("{v:.1}") };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                if first { g.scenario.as_str() } else { "" },
                if first { g.label.as_str() } else { "" },
                if first { g.runs.to_string() } else { String::new() },
                if first { figures.join("; ") } else { String::new() },
                name,
                cell(p[0]),
                cell(p[1]),
                cell(p[2]),
                cell(p[3]),
                if first { verdict.as_str() } else { "" },
            );
        }
    }
    // A tool call against the bare HTTP path of the same server (issue 5 target: >= 85 %).
    let mut shares = String::new();
    for g in groups.iter().filter(|g| g.scenario == "echo") {
        let ping = groups.iter().find(|p| p.scenario == "ping" && p.label == g.label);
        if let (Some(e), Some(p)) =
            (g.throughput.get("calls_per_s"), ping.and_then(|p| p.throughput.get("calls_per_s")))
        {
            let _ = writeln!(
                shares,
                "| {} | {} | {} | {:.1} % |",
                g.label,
                thousands(*e),
                thousands(*p),
                100.0 * e / p
            );
        }
    }
    if !shares.is_empty() {
        let _ = writeln!(out, "\n| server | echo calls/s | ping calls/s | echo / ping |");
        let _ = writeln!(out, "|---|---:|---:|---:|");
        out.push_str(&shares);
    }
    for (a, b) in ratios {
        ratio_table(&mut out, groups, a, b);
    }
    out
}

/// The ratio table `a / b`: between two labels (servers), per scenario; or, when `a` and `b`
/// are not labels but scenarios (`modern/echo`), between the two scenarios, per label.
fn ratio_table(out: &mut String, groups: &[Group], a: &str, b: &str) {
    let has_label = |l: &str| groups.iter().any(|g| g.label == l);
    let by_label = has_label(a) && has_label(b);
    let _ = writeln!(
        out,
        "\n| {} | metric | {a} | {b} | {a} / {b} |",
        if by_label { "scenario" } else { "server" }
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|");
    // Each row's key (a scenario, or a label) and its two groups.
    let mut keys: Vec<&str> = Vec::new();
    for g in groups {
        let key = if by_label { g.scenario.as_str() } else { g.label.as_str() };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    for key in keys {
        let find = |side: &str| {
            groups.iter().find(|g| {
                if by_label {
                    g.scenario == key && g.label == side
                } else {
                    g.label == key && g.scenario == side
                }
            })
        };
        let (Some(ga), Some(gb)) = (find(a), find(b)) else { continue };
        for (k, va) in &ga.throughput {
            if let Some(vb) = gb.throughput.get(k) {
                let _ = writeln!(
                    out,
                    "| {key} | {} | {} | {} | {:.2} |",
                    unit(k),
                    thousands(*va),
                    thousands(*vb),
                    va / vb
                );
            }
        }
        if let (Some(sa), Some(sb)) = (ga.latency.first(), gb.latency.first()) {
            for (metric, va, vb) in
                [("p50 µs", sa.p50_us, sb.p50_us), ("p99 µs", sa.p99_us, sb.p99_us)]
            {
                let _ = writeln!(out, "| {key} | {metric} | {va:.1} | {vb:.1} | {:.2} |", va / vb);
            }
        }
    }
}

pub fn write_outputs(
    groups: &[Group],
    markdown_path: Option<&Path>,
    json_path: Option<&Path>,
    plot_path: Option<&Path>,
    title: &str,
    ratios: &[(&str, &str)],
) -> anyhow::Result<String> {
    let md = markdown(groups, ratios);
    if let Some(p) = markdown_path {
        std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = json_path {
        let text = serde_json::to_string_pretty(groups)?;
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = plot_path {
        let curves: Vec<Curve> = groups
            .iter()
            .flat_map(|g| {
                g.curves.iter().map(|c| Curve { name: c.name.clone(), points: c.points.clone() })
            })
            .collect();
        std::fs::write(p, plot::svg(title, &curves))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(md)
}

/// Every `new/benchmark.json` + `new/estimates.json` pair under criterion's directory, as a
/// markdown table: mean and median time, and throughput when the bench declared one.
pub fn criterion_table(dir: &Path) -> anyhow::Result<String> {
    let mut found = Vec::new();
    collect_criterion(dir, &mut found)?;
    found.sort_by_key(|row| natural_key(&row.0));
    let mut out = String::new();
    let _ = writeln!(out, "| benchmark | mean | median | throughput |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (id, mean_ns, median_ns, throughput) in found {
        let _ = writeln!(out, "| {id} | {} | {} | {throughput} |", ns(mean_ns), ns(median_ns));
    }
    Ok(out)
}

type CriterionRow = (String, f64, f64, String);

fn collect_criterion(dir: &Path, found: &mut Vec<CriterionRow>) -> anyhow::Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            let bench = path.join("benchmark.json");
            let estimates = path.join("estimates.json");
            if let (Ok(b), Ok(e)) =
                (std::fs::read_to_string(&bench), std::fs::read_to_string(&estimates))
            {
                let b: serde_json::Value = serde_json::from_str(&b)?;
                let e: serde_json::Value = serde_json::from_str(&e)?;
                let id = b["full_id"].as_str().unwrap_or("?").to_owned();
                let mean = e["mean"]["point_estimate"].as_f64().unwrap_or(f64::NAN);
                let median = e["median"]["point_estimate"].as_f64().unwrap_or(f64::NAN);
                let throughput = match b["throughput"].as_object().and_then(|t| t.iter().next()) {
                    Some((kind, n)) => {
                        let per_s = n.as_f64().unwrap_or(0.0) / (mean * 1e-9);
                        format!("{} {}/s", thousands(per_s), kind.to_lowercase())
                    }
                    None => String::new(),
                };
                found.push((id, mean, median, throughput));
            }
        } else if path.file_name().is_some_and(|n| n != "report") {
            collect_criterion(&path, found)?;
        }
    }
    Ok(())
}

/// `append/16` before `append/1024`: runs of digits compare as numbers.
fn natural_key(id: &str) -> Vec<(String, u64)> {
    let mut key = Vec::new();
    let mut text = String::new();
    let mut chars = id.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_digit() {
            let mut n: u64 = 0;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                n = n.saturating_mul(10).saturating_add(u64::from(d));
                chars.next();
            }
            key.push((std::mem::take(&mut text), n));
        } else {
            text.push(c);
            chars.next();
        }
    }
    key.push((text, 0));
    key
}

fn ns(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2} µs", v / 1e3)
    } else {
        format!("{v:.1} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_of_bench_ids() {
        let mut ids = vec!["append/1024", "append/16", "lookup/2", "append/65536"];
        ids.sort_by_key(|id| natural_key(id));
        assert_eq!(ids, vec!["append/16", "append/1024", "append/65536", "lookup/2"]);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    fn run(scenario: &str, label: &str, calls_per_s: f64, p50_us: f64) -> RunReport {
        let mut r = RunReport::new(scenario, label, "http://x/mcp", serde_json::json!({}));
        r.throughput.insert("calls_per_s".into(), calls_per_s);
        let mut hist = crate::stats::new_histogram();
        crate::stats::record(&mut hist, std::time::Duration::from_nanos((p50_us * 1000.0) as u64));
        r.latency.push(Series::from_histogram(scenario, &hist));
        r
    }

    #[test]
    fn ratios_between_labels_or_between_scenarios() {
        let reports = [
            run("echo", "tidemark", 100.0, 500.0),
            run("modern", "tidemark", 150.0, 400.0),
            run("echo", "rmcp", 20.0, 3000.0),
        ];
        let groups = group(&reports);
        let order: Vec<&str> = groups.iter().map(|g| g.scenario.as_str()).collect();
        assert_eq!(order, ["echo", "echo", "modern"], "modern is listed after echo");
        let md = markdown(&groups, &[("tidemark", "rmcp"), ("modern", "echo")]);
        assert!(md.contains("| scenario | metric | tidemark | rmcp | tidemark / rmcp |"), "{md}");
        assert!(md.contains("| echo | calls/s | 100 | 20 | 5.00 |"), "{md}");
        assert!(md.contains("| server | metric | modern | echo | modern / echo |"), "{md}");
        assert!(md.contains("| tidemark | calls/s | 150 | 100 | 1.50 |"), "{md}");
        assert!(!md.contains("| rmcp | calls/s"), "rmcp has no modern run: {md}");
    }
}
