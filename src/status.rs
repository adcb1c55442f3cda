//! The admin listener's status page (`GET /status`): one server-rendered HTML page, inline CSS
//! only, no script, that reloads itself (`<meta http-equiv="refresh">`). It is rendered from the
//! parsed text of the same exposition `/metrics` answers (`Samples`), so it keeps no bookkeeping
//! of its own and cannot disagree with a scrape; the few facts that are not metrics (version,
//! node id, driver, uptime, drain phase, `--core-buffer-bytes`, the upstreams' names) come in
//! `Facts`. Each figure carries `data-metric` (the family) and `data-labels` (a label subset):
//! the figure is the sum of that family's samples whose labels include them, which is how
//! `scripts/browser.sh` checks the page against `/metrics`.
//!
//! Owns: the page, its refresh bounds, the HTML escaping, and `RecentRefusals` (a small ring of
//! refusal counts sampled at page loads, for "in the last minutes" next to "since start").
//! Never: reads a core's cells itself, or writes anything a worker reads.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Seconds between the page's reloads unless `?refresh=` says otherwise.
pub(crate) const STATUS_REFRESH_SECS: u64 = 5;
/// How long one rendering of the page's figures is served before the next `/status` renders
/// them again: a page costs about 0.9 ms of CPU (the whole exposition rendered, parsed and
/// summed), and six looping loaders on the admin port pushed the workers' ping p99 to 42 ms
/// (issue 38); with this, any number of loaders cost one rendering a second.
pub(crate) const STATUS_RENDER_EVERY: Duration = Duration::from_secs(1);
/// The smallest `?refresh=` (a faster page would be a load generator on the admin threads).
pub(crate) const STATUS_REFRESH_SECS_MIN: u64 = 1;
/// The largest `?refresh=` (an hour).
pub(crate) const STATUS_REFRESH_SECS_MAX: u64 = 3600;
/// How far back "recent" refusals reach.
pub(crate) const RECENT_WINDOW: Duration = Duration::from_secs(300);
/// Page loads closer together than this share one sample of the ring.
pub(crate) const RECENT_SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Samples `RecentRefusals` keeps: enough to span `RECENT_WINDOW` at `RECENT_SAMPLE_EVERY`.
const RECENT_SAMPLES_MAX: usize =
    (RECENT_WINDOW.as_secs() / RECENT_SAMPLE_EVERY.as_secs()) as usize + 2;

/// Families counting refused requests, and the label that names the reason.
const REFUSAL_FAMILIES: [&str; 5] = [
    "tidemark_migrations_rejected_total",
    "tidemark_auth_refused_total",
    "tidemark_handoffs_refused_total",
    "tidemark_request_state_refused_total",
    "tidemark_misrouted_total",
];

/// Families counting limits reached.
const LIMIT_FAMILIES: [&str; 4] = [
    "tidemark_limit_hits_total",
    "tidemark_accept_descriptors_exhausted_total",
    "tidemark_keyed_calls_timed_out_total",
    "tidemark_keyed_answers_not_retained_total",
];

/// Where the server is in its life, as the page shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DrainState {
    Serving,
    /// A drain began; running calls finish for at most this long.
    Draining {
        left: Duration,
    },
    /// Every core quiet or the drain's time up: streams are being ended.
    Ending,
}

/// What the page shows that is not a metric.
pub(crate) struct Facts<'a> {
    pub(crate) version: &'a str,
    pub(crate) node_id: u8,
    /// The I/O driver the workers run (`uring` or `epoll`).
    pub(crate) driver: &'a str,
    pub(crate) uptime: Duration,
    pub(crate) cores: usize,
    /// `--core-buffer-bytes`: the budget of each core's replay rings.
    pub(crate) core_buffer_bytes: u64,
    pub(crate) drain: DrainState,
    /// The upstreams' labels (`--upstream` names, else their commands or URLs), in order.
    pub(crate) upstreams: &'a [String],
}

/// The `?refresh=` of a request target: `Ok(None)` when absent, `Err` when it is not a number
/// within `STATUS_REFRESH_SECS_MIN..=STATUS_REFRESH_SECS_MAX`.
pub(crate) fn refresh_query(target: &str) -> Result<Option<u64>, String> {
    let Some((_, query)) = target.split_once('?') else { return Ok(None) };
    let Some(value) = query.split('&').find_map(|pair| pair.strip_prefix("refresh=")) else {
        return Ok(None);
    };
    match value.parse::<u64>() {
        Ok(secs) if (STATUS_REFRESH_SECS_MIN..=STATUS_REFRESH_SECS_MAX).contains(&secs) => {
            Ok(Some(secs))
        }
        _ => Err(format!(
            "refresh must be whole seconds in {STATUS_REFRESH_SECS_MIN}..={STATUS_REFRESH_SECS_MAX}\n"
        )),
    }
}

/// One sample of an exposition: its family name, its labels as rendered (`a="x",b="y"`, empty
/// for none) and its value as rendered.
struct Sample<'a> {
    name: &'a str,
    labels: &'a str,
    value: &'a str,
}

/// The samples of one `/metrics` exposition, in its order.
pub(crate) struct Samples<'a>(Vec<Sample<'a>>);

impl<'a> Samples<'a> {
    /// Parses the text format as `metrics` renders it (comments skipped).
    pub(crate) fn parse(text: &'a str) -> Samples<'a> {
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}').unwrap_or(rest)),
                None => (series, ""),
            };
            samples.push(Sample { name, labels, value });
        }
        Samples(samples)
    }

    /// The sum of the samples of `name` whose labels include every label of `labels` (a
    /// comma-separated subset as rendered; empty: all). Values are integers but for histogram
    /// sums, which the page does not show.
    pub(crate) fn sum(&self, name: &str, labels: &str) -> u64 {
        let wanted: Vec<&str> = split_labels(labels).collect();
        self.0
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| wanted.iter().all(|w| split_labels(s.labels).any(|l| l == *w)))
            .map(|s| s.value.parse::<u64>().unwrap_or(0))
            .sum()
    }

    /// The label strings of every sample of `name`, in order.
    fn series_of<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a str> + 's {
        self.0.iter().filter(move |s| s.name == name).map(|s| s.labels)
    }
}

/// The labels of a rendered label set; commas inside quoted values do not split.
fn split_labels(labels: &str) -> impl Iterator<Item = &str> {
    let mut rest = labels;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut quoted, mut escaped, mut end) = (false, false, rest.len());
        for (i, c) in rest.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = !quoted,
                ',' if !quoted => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let label = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or("");
        Some(label)
    })
}

/// A label value as the text format writes it (as `metrics` escapes it).
fn prometheus_escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Appends `text` with `&`, `<`, `>`, `"` and `'` escaped: safe in element text and in a
/// quoted attribute.
pub(crate) fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// The refusal counts of an exposition: (family, labels) → count, every sample of
/// `REFUSAL_FAMILIES` in order.
pub(crate) fn refusal_counts(samples: &Samples<'_>) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for family in REFUSAL_FAMILIES {
        for labels in samples.series_of(family) {
            out.push((series_key(family, labels), samples.sum(family, labels)));
        }
    }
    out
}

fn series_key(family: &str, labels: &str) -> String {
    if labels.is_empty() {
        family.to_owned()
    } else {
        format!("{family}{{{labels}}}")
    }
}

/// Refusal counts sampled at page loads (at most one sample per `RECENT_SAMPLE_EVERY`, those of
/// the last `RECENT_WINDOW`), so the page can say how many came lately without a timer thread.
#[derive(Default)]
pub(crate) struct RecentRefusals {
    samples: VecDeque<(Instant, Vec<(String, u64)>)>,
}

/// What `RecentRefusals::observe` found: over how long, and per series how many came.
pub(crate) struct Recent {
    pub(crate) span: Duration,
    deltas: Vec<(String, u64)>,
}

impl Recent {
    fn of(&self, key: &str) -> u64 {
        self.deltas.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n)
    }
}

impl RecentRefusals {
    /// Records `now`'s counts (unless a sample is younger than `RECENT_SAMPLE_EVERY`) and
    /// answers the increase since the oldest sample within `RECENT_WINDOW`.
    pub(crate) fn observe(&mut self, now: Instant, counts: &[(String, u64)]) -> Recent {
        while self.samples.front().is_some_and(|(at, _)| now.duration_since(*at) > RECENT_WINDOW) {
            self.samples.pop_front();
        }
        let fresh = self
            .samples
            .back()
            .is_some_and(|(at, _)| now.duration_since(*at) < RECENT_SAMPLE_EVERY);
        if !fresh {
            if self.samples.len() >= RECENT_SAMPLES_MAX {
                self.samples.pop_front();
            }
            self.samples.push_back((now, counts.to_vec()));
        }
        let (since, oldest) = self.samples.front().map_or((now, &[][..]), |(at, c)| (*at, c));
        let deltas = counts
            .iter()
            .map(|(key, n)| {
                let before = oldest.iter().find(|(k, _)| k == key).map_or(0, |(_, b)| *b);
                (key.clone(), n.saturating_sub(before))
            })
            .collect();
        Recent { span: now.duration_since(since), deltas }
    }
}

/// The page's inline style sheet (the one `style-src 'unsafe-inline'` admits).
const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}\
table{border-collapse:collapse}th,td{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:right}\
th:first-child,td:first-child{text-align:left}td.hit{color:#b00;font-weight:bold}\
.serving{color:#070}.draining,.ending{color:#b00;font-weight:bold}meter{width:8em}\
dl{display:grid;grid-template-columns:max-content auto;gap:.1em 1em}dd{margin:0}";

/// A figure: `<td>` (or `<dd>`) holding the sum of `family`'s samples with `labels`, marked so
/// a reader can find its source (`data-metric`, `data-labels`, and `extra` attributes).
fn figure(
    out: &mut String,
    tag: &str,
    samples: &Samples<'_>,
    family: &str,
    labels: &str,
    extra: &str,
) -> u64 {
    let value = samples.sum(family, labels);
    let class =
        if value > 0 && family.ends_with("_total") && tag == "td" { " class=\"hit\"" } else { "" };
    out.push('<');
    out.push_str(tag);
    out.push_str(class);
    out.push_str(" data-metric=\"");
    push_escaped(out, family);
    out.push_str("\" data-labels=\"");
    push_escaped(out, labels);
    out.push('"');
    out.push_str(extra);
    let _ = write!(out, ">{value}</{tag}>");
    value
}

/// The value of `label` (`name`) in a rendered label set, unescaped as far as the page needs.
fn label_value<'s>(labels: &'s str, name: &str) -> Option<&'s str> {
    split_labels(labels).find_map(|l| l.strip_prefix(name)?.strip_prefix("=\"")?.strip_suffix('"'))
}

/// Renders the whole page into `out`, reloading every `refresh_secs`.
#[cfg(test)]
pub(crate) fn render(
    facts: &Facts<'_>,
    refresh_secs: u64,
    samples: &Samples<'_>,
    recent: &Recent,
    out: &mut String,
) {
    let mut sections = String::new();
    render_sections(facts, samples, recent, &mut sections);
    wrap(refresh_secs, &sections, out);
}

/// The page's figures (all of it but the frame around them, which holds the request's
/// `?refresh=`): what the admin listener renders at most once per `STATUS_RENDER_EVERY`.
pub(crate) fn render_sections(
    facts: &Facts<'_>,
    samples: &Samples<'_>,
    recent: &Recent,
    out: &mut String,
) {
    server_section(facts, samples, out);
    cores_section(facts, samples, out);
    upstreams_section(facts, samples, out);
    refusals_section(samples, recent, out);
    limits_section(samples, out);
}

/// The whole page: `sections` (from `render_sections`) in the frame that reloads it every
/// `refresh_secs`.
pub(crate) fn wrap(refresh_secs: u64, sections: &str, out: &mut String) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{refresh_secs}\"><title>tidemark status</title>\
         <style>{STYLE}</style></head><body>\n"
    );
    out.push_str(sections);
    let _ = write!(
        out,
        "<p>Reloads every <span id=\"refresh\">{refresh_secs}</span> s (<code>?refresh=N</code>, \
         {STATUS_REFRESH_SECS_MIN}..={STATUS_REFRESH_SECS_MAX}). Gauges are sampled by each \
         core every reaper interval; the figures are those of <code>/metrics</code>, rendered \
         at most once a second.</p>\n\
         </body></html>\n"
    );
}

fn server_section(facts: &Facts<'_>, samples: &Samples<'_>, out: &mut String) {
    out.push_str("<h1>tidemark ");
    push_escaped(out, facts.version);
    out.push_str("</h1>\n<dl id=\"server\">");
    let _ = write!(out, "<dt>node id</dt><dd id=\"node-id\">{:02x}</dd>", facts.node_id);
    out.push_str("<dt>driver</dt><dd id=\"driver\">");
    push_escaped(out, facts.driver);
    let up = facts.uptime.as_secs();
    let _ = write!(
        out,
        "</dd><dt>uptime</dt><dd id=\"uptime\" data-seconds=\"{up}\">{}d {:02}:{:02}:{:02}</dd>",
        up / 86_400,
        up / 3600 % 24,
        up / 60 % 60,
        up % 60
    );
    let _ = write!(out, "<dt>cores</dt><dd id=\"cores\">{}</dd>", facts.cores);
    out.push_str("<dt>state</dt>");
    match facts.drain {
        DrainState::Serving => out.push_str("<dd id=\"drain\" class=\"serving\">serving</dd>"),
        DrainState::Draining { left } => {
            let _ = write!(
                out,
                "<dd id=\"drain\" class=\"draining\">draining, at most {} s left</dd>",
                left.as_secs()
            );
        }
        DrainState::Ending => out.push_str("<dd id=\"drain\" class=\"ending\">ending streams</dd>"),
    }
    out.push_str("<dt>sessions</dt>");
    figure(out, "dd", samples, "tidemark_sessions_active", "", "");
    out.push_str("<dt>streams live</dt>");
    figure(out, "dd", samples, "tidemark_streams_live", "", "");
    out.push_str("<dt>streams owed</dt>");
    figure(out, "dd", samples, "tidemark_streams_owed", "", "");
    out.push_str("<dt>ring bytes</dt>");
    figure(out, "dd", samples, "tidemark_ring_bytes", "", "");
    out.push_str("<dt>connections</dt>");
    figure(out, "dd", samples, "tidemark_connections_active", "", "");
    out.push_str("<dt>requests</dt>");
    figure(out, "dd", samples, "tidemark_requests_total", "", "");
    out.push_str("</dl>\n");
}

fn cores_section(facts: &Facts<'_>, samples: &Samples<'_>, out: &mut String) {
    out.push_str(
        "<h2>Cores</h2>\n<table id=\"cores-table\"><tr><th>core</th><th>sessions</th>\
         <th>live streams</th><th>owed streams</th><th>ring bytes</th><th>of budget</th>\
         <th>connections</th><th>tasks</th></tr>\n",
    );
    for core in 0..facts.cores {
        let labels = format!("core=\"{core}\"");
        let extra = format!(" data-core=\"{core}\"");
        let _ = write!(out, "<tr><td>{core}</td>");
        figure(out, "td", samples, "tidemark_core_sessions_active", &labels, &extra);
        figure(out, "td", samples, "tidemark_core_streams_live", &labels, &extra);
        figure(out, "td", samples, "tidemark_core_streams_owed", &labels, &extra);
        let ring = figure(out, "td", samples, "tidemark_core_ring_bytes", &labels, &extra);
        let budget = facts.core_buffer_bytes.max(1);
        let percent = ring.saturating_mul(100) / budget;
        let _ = write!(
            out,
            "<td><meter min=\"0\" max=\"{budget}\" high=\"{}\" value=\"{ring}\"></meter> \
             {percent}% of <span data-config=\"core-buffer-bytes\">{}</span></td>",
            budget / 10 * 9,
            facts.core_buffer_bytes
        );
        figure(out, "td", samples, "tidemark_core_connections_active", &labels, &extra);
        figure(out, "td", samples, "tidemark_core_tasks_active", &labels, &extra);
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn upstreams_section(facts: &Facts<'_>, samples: &Samples<'_>, out: &mut String) {
    out.push_str("<h2>Upstreams</h2>\n");
    if facts.upstreams.is_empty() {
        out.push_str("<p id=\"upstreams\">No <code>--upstream</code>.</p>\n");
        return;
    }
    out.push_str("<p>Child processes alive (all upstreams, all cores): ");
    figure(out, "span", samples, "tidemark_upstream_children", "", "");
    out.push_str(
        ". Children and restarts are not yet counted per upstream.</p>\n<table id=\"upstreams\">\
         <tr><th>upstream</th><th>calls forwarded</th></tr>\n",
    );
    for name in facts.upstreams {
        let labels = format!("upstream=\"{}\"", prometheus_escape(name));
        let mut extra = String::from(" data-upstream=\"");
        push_escaped(&mut extra, name);
        extra.push('"');
        out.push_str("<tr><td>");
        push_escaped(out, name);
        out.push_str("</td>");
        figure(
            out,
            "td",
            samples,
            "tidemark_upstream_call_duration_seconds_count",
            &labels,
            &extra,
        );
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn refusals_section(samples: &Samples<'_>, recent: &Recent, out: &mut String) {
    let _ = write!(
        out,
        "<h2>Refusals</h2>\n<table id=\"refusals\"><tr><th>counter</th><th>reason</th>\
         <th>since start</th><th>last <span id=\"recent-span\">{}</span> s</th></tr>\n",
        recent.span.as_secs()
    );
    for family in REFUSAL_FAMILIES {
        for labels in samples.series_of(family) {
            let reason = label_value(labels, "reason").or_else(|| label_value(labels, "name"));
            let mut extra = String::new();
            if let Some(reason) = reason {
                extra.push_str(" data-reason=\"");
                push_escaped(&mut extra, reason);
                extra.push('"');
            }
            out.push_str("<tr><td>");
            push_escaped(out, family.trim_start_matches("tidemark_"));
            out.push_str("</td><td>");
            push_escaped(out, reason.unwrap_or("—"));
            out.push_str("</td>");
            figure(out, "td", samples, family, labels, &extra);
            let _ = writeln!(
                out,
                "<td data-recent>{}</td></tr>",
                recent.of(&series_key(family, labels))
            );
        }
    }
    out.push_str("</table>\n");
}

fn limits_section(samples: &Samples<'_>, out: &mut String) {
    out.push_str(
        "<h2>Limits hit</h2>\n<table id=\"limits\"><tr><th>limit</th><th>since start</th></tr>\n",
    );
    for family in LIMIT_FAMILIES {
        for labels in samples.series_of(family) {
            let limit = label_value(labels, "limit");
            let mut extra = String::new();
            if let Some(limit) = limit {
                extra.push_str(" data-limit=\"");
                push_escaped(&mut extra, limit);
                extra.push('"');
            }
            out.push_str("<tr><td>");
            push_escaped(out, limit.unwrap_or(family.trim_start_matches("tidemark_")));
            out.push_str("</td>");
            figure(out, "td", samples, family, labels, &extra);
            out.push_str("</tr>\n");
        }
    }
    out.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = "# HELP x y\n# TYPE tidemark_sessions_active gauge\n\
        tidemark_sessions_active 5\n\
        tidemark_core_sessions_active{core=\"0\"} 2\n\
        tidemark_core_sessions_active{core=\"1\"} 3\n\
        tidemark_core_ring_bytes{core=\"0\"} 512\n\
        tidemark_migrations_rejected_total{reason=\"id_reused\"} 4\n\
        tidemark_limit_hits_total{limit=\"sessions\"} 7\n\
        tidemark_upstream_call_duration_seconds_count{upstream=\"a,\\\"b\",tool=\"x\"} 2\n\
        tidemark_upstream_call_duration_seconds_count{upstream=\"a,\\\"b\",tool=\"other\"} 3\n";

    fn facts(upstreams: &[String]) -> Facts<'_> {
        Facts {
            version: "1.2.3",
            node_id: 0xab,
            driver: "uring",
            uptime: Duration::from_secs(3661),
            cores: 2,
            core_buffer_bytes: 1024,
            drain: DrainState::Serving,
            upstreams,
        }
    }

    fn page(upstreams: &[String]) -> String {
        let samples = Samples::parse(EXPOSITION);
        let recent = RecentRefusals::default().observe(Instant::now(), &refusal_counts(&samples));
        let mut out = String::new();
        render(&facts(upstreams), 5, &samples, &recent, &mut out);
        out
    }

    #[test]
    fn sums_match_label_subsets_and_quoted_commas_do_not_split() {
        let samples = Samples::parse(EXPOSITION);
        assert_eq!(samples.sum("tidemark_sessions_active", ""), 5);
        assert_eq!(samples.sum("tidemark_core_sessions_active", ""), 5);
        assert_eq!(samples.sum("tidemark_core_sessions_active", "core=\"1\""), 3);
        let family = "tidemark_upstream_call_duration_seconds_count";
        assert_eq!(samples.sum(family, "upstream=\"a,\\\"b\""), 5);
        assert_eq!(samples.sum(family, "upstream=\"a\""), 0);
    }

    #[test]
    fn figures_carry_their_source_and_value() {
        let out = page(&[]);
        assert!(out.contains("data-metric=\"tidemark_core_sessions_active\" data-labels=\"core=&quot;1&quot;\" data-core=\"1\">3<"), "{out}");
        assert!(out.contains("data-metric=\"tidemark_core_ring_bytes\" data-labels=\"core=&quot;0&quot;\" data-core=\"0\">512<"));
        assert!(out.contains("value=\"512\"></meter> 50% of"));
        assert!(out.contains("data-reason=\"id_reused\">4<"));
        assert!(out.contains("data-limit=\"sessions\">7<"));
        assert!(out.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
        assert!(out.contains("<dd id=\"node-id\">ab</dd>"));
        assert!(out.contains(">0d 01:01:01<"));
    }

    #[test]
    fn a_hostile_upstream_name_is_escaped_everywhere() {
        let hostile = "<script>alert('x')</script>\"&a,\"b".to_owned();
        let out = page(std::slice::from_ref(&hostile));
        assert!(!out.contains("<script>"), "{out}");
        assert!(!out.contains("alert('x')"));
        assert!(out.contains(
            "<td>&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;a,&quot;b</td>"
        ));
        // Its attribute is one quoted value: no raw quote ends it early.
        let attr =
            "data-upstream=\"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;a,&quot;b\"";
        assert!(out.contains(attr), "{out}");
        let start = out.find("<table id=\"upstreams\">").unwrap();
        let table = &out[start..out[start..].find("</table>").unwrap() + start];
        assert_eq!(table.matches('<').count(), table.matches('>').count());
    }

    #[test]
    fn refresh_query_within_bounds() {
        assert_eq!(refresh_query("/status"), Ok(None));
        assert_eq!(refresh_query("/status?x=1"), Ok(None));
        assert_eq!(refresh_query("/status?refresh=1"), Ok(Some(1)));
        assert_eq!(refresh_query("/status?a=b&refresh=3600"), Ok(Some(3600)));
        assert!(refresh_query("/status?refresh=0").is_err());
        assert!(refresh_query("/status?refresh=3601").is_err());
        assert!(refresh_query("/status?refresh=-1").is_err());
        assert!(refresh_query("/status?refresh=").is_err());
    }

    #[test]
    fn recent_refusals_count_the_increase_within_the_window() {
        let mut ring = RecentRefusals::default();
        let t0 = Instant::now();
        let counts = |n: u64| vec![("r".to_owned(), n)];
        assert_eq!(ring.observe(t0, &counts(10)).of("r"), 0);
        // Within the sample interval: no new sample, the increase since t0.
        let recent = ring.observe(t0 + Duration::from_secs(5), &counts(12));
        assert_eq!((recent.of("r"), recent.span.as_secs()), (2, 5));
        assert_eq!(ring.samples.len(), 1);
        ring.observe(t0 + Duration::from_secs(60), &counts(15));
        // Past the window, t0's sample is gone: counted from the one at 60 s.
        let recent = ring.observe(t0 + RECENT_WINDOW + Duration::from_secs(30), &counts(20));
        assert_eq!(recent.of("r"), 5);
        // Never more samples than the bound, however often it is called.
        for i in 0..10_000u64 {
            ring.observe(t0 + Duration::from_secs(400 + i * 11), &counts(20 + i));
        }
        assert!(ring.samples.len() <= RECENT_SAMPLES_MAX);
    }
}
