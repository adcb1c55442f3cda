//! HDR percentile plots as standalone SVG: latency (linear y, µs) against percentile on a
//! log-scaled x axis of 1/(1−p), so 90 %, 99 %, 99.9 % … are equally spaced and the tail gets
//! the room it deserves (the HdrHistogram plotter's layout).
//!
//! Owns: scales, ticks, polylines, legend. Input is `stats::Series::curve` points.
//! Never: depends on a plotting library; the output is plain SVG 1.1 text.

use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 560.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
/// The deepest tail shown: 99.9999 %.
const DECADES_MAX: f64 = 6.0;
const COLORS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

#[derive(Clone, Debug)]
pub struct Curve {
    pub name: String,
    /// `[percentile 0..100, µs]`.
    pub points: Vec<[f64; 2]>,
}

fn tail_decades(percentile: f64) -> f64 {
    (1.0 / (1.0 - percentile / 100.0)).log10()
}

/// Smallest 1/2/5 × 10^k at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let base = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * base >= v * 0.999_999 {
            return m * base;
        }
    }
    10.0 * base
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn percent_label(decade: u32) -> String {
    match decade {
        0 => "0%".to_owned(),
        1 => "90%".to_owned(),
        d => {
            let nines = "9".repeat(d as usize);
            if d <= 2 {
                format!("{nines}%")
            } else {
                format!("{}.{}%", &nines[..2], &nines[2..])
            }
        }
    }
}

pub fn svg(title: &str, curves: &[Curve]) -> String {
    let finite: Vec<Vec<[f64; 2]>> = curves
        .iter()
        .map(|c| {
            c.points
                .iter()
                .filter(|p| p[0] < 100.0)
                .map(|p| [tail_decades(p[0]).min(DECADES_MAX), p[1]])
                .collect()
        })
        .collect();
    let x_max = finite
        .iter()
        .flat_map(|c| c.iter().map(|p| p[0]))
        .fold(1.0f64, f64::max)
        .ceil()
        .min(DECADES_MAX);
    let y_max =
        nice_ceiling(finite.iter().flat_map(|c| c.iter().map(|p| p[1])).fold(0.0, f64::max));
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + x / x_max * plot_w;
    let sy = |y: f64| TOP + plot_h - y / y_max * plot_h;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="16">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    for decade in 0..=(x_max as u32) {
        let x = sx(f64::from(decade));
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 18.0,
            percent_label(decade)
        );
    }
    for i in 0..=5 {
        let v = y_max * f64::from(i) / 5.0;
        let y = sy(v);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 8.0,
            y + 4.0,
            format_us(v)
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 18.0
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(20 {:.1}) rotate(-90)" text-anchor="middle">latency (µs)</text>"#,
        TOP + plot_h / 2.0
    );
    for (i, (curve, points)) in curves.iter().zip(&finite).enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut path = String::new();
        for p in points {
            let _ = write!(path, "{:.1},{:.1} ", sx(p[0]), sy(p[1]));
        }
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.trim_end()
        );
        let ly = TOP + 18.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + 12.0,
            LEFT + 36.0,
            LEFT + 42.0,
            ly + 4.0,
            escape(&curve.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn format_us(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_and_labels() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(500.0), 500.0);
        assert_eq!(percent_label(0), "0%");
        assert_eq!(percent_label(1), "90%");
        assert_eq!(percent_label(2), "99%");
        assert_eq!(percent_label(4), "99.99%");
        assert!((tail_decades(99.9) - 3.0).abs() < 1e-9);
    }

    #[test]
    fn svg_has_one_polyline_per_curve() {
        let curves = vec![
            Curve { name: "a<b".into(), points: vec![[0.0, 10.0], [99.0, 50.0], [100.0, 90.0]] },
            Curve { name: "c".into(), points: vec![[0.0, 20.0], [99.9, 70.0]] },
        ];
        let text = svg("t", &curves);
        assert_eq!(text.matches("<polyline").count(), 2);
        assert!(text.contains("a&lt;b"));
        assert!(text.ends_with("</svg>\n"));
    }
}
