//! Goal: `deploy/grafana-dashboard.json` is valid JSON built only on names tidemark exposes:
//! every `tidemark_…` name in its queries (a histogram's `_bucket`/`_sum`/`_count` taken as its
//! family) has a `# TYPE` line in `/metrics`, so a rename cannot leave the dashboard blank.
//! Method: the real binary with `--metrics-listen`, one scrape; the names are read from the
//! dashboard's `expr` strings of every panel and template query.

mod support;

use support::{scrape, Server};

/// Every `tidemark_[a-z0-9_]*` word in `text`.
fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("tidemark_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The query strings of the dashboard: panels' `targets[].expr` and templates' `query`.
fn queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            out.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for template in dashboard["templating"]["list"].as_array().expect("templates") {
        if let Some(q) = template["query"].as_str() {
            out.push(q.to_owned());
        }
    }
    out
}

#[test]
fn every_metric_the_dashboard_uses_is_exposed() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana-dashboard.json");
    let text = std::fs::read_to_string(path).expect("read the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let server = Server::start(&["--metrics-listen", "127.0.0.1:0"]);
    let exposition = scrape(&server.metrics());
    let mut used = 0;
    for query in queries(&dashboard) {
        for name in metric_names(&query) {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|f| exposition.contains(&format!("# TYPE {f} histogram\n")))
                .unwrap_or(&name);
            assert!(
                exposition.contains(&format!("# TYPE {family} ")),
                "the dashboard's query {query:?} uses {name}, which /metrics does not expose"
            );
            used += 1;
        }
    }
    assert!(used >= 20, "the dashboard queries {used} metric names: fewer than expected");
}
