//! A self-contained HTML report with inline SVG charts: throughput over
//! time, latency percentiles per operation, space on disk over time, and a
//! table of the five metrics. No scripts, no external files.

use std::fmt::Write as _;
use std::path::Path;

use super::text::bytes;
use super::Report;
use crate::Result;

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const W: f64 = 760.0;
const H: f64 = 300.0;
const ML: f64 = 70.0;
const MR: f64 = 160.0;
const MT: f64 = 30.0;
const MB: f64 = 40.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * p {
            return m * p;
        }
    }
    10.0 * p
}

fn fmt_num(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A line chart of named series of (x, y) points.
pub fn line_chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let xmax = nice_max(
        series
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.0))
            .fold(0.0, f64::max),
    );
    let ymax = nice_max(
        series
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let px = |x: f64| ML + x / xmax * pw;
    let py = |y: f64| MT + ph - y / ymax * ph;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11"><text x="{}" y="18" font-size="14" text-anchor="middle">{}</text>"#,
        ML + pw / 2.0,
        esc(title)
    );
    for i in 0..=5 {
        let y = ymax * i as f64 / 5.0;
        let _ = write!(
            s,
            r##"<line x1="{ML}" x2="{0}" y1="{1}" y2="{1}" stroke="#ddd"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
            ML + pw,
            py(y),
            ML - 4.0,
            py(y) + 4.0,
            fmt_num(y)
        );
        let x = xmax * i as f64 / 5.0;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(x),
            MT + ph + 14.0,
            fmt_num(x)
        );
    }
    let _ = write!(
        s,
        r##"<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#888"/><text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(14,{}) rotate(-90)" text-anchor="middle">{}</text>"##,
        ML + pw / 2.0,
        H - 6.0,
        esc(xlabel),
        MT + ph / 2.0,
        esc(ylabel)
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/><rect x="{}" y="{}" width="10" height="10" fill="{c}"/><text x="{}" y="{}">{}</text>"#,
            path.join(" "),
            ML + pw + 10.0,
            MT + i as f64 * 16.0,
            ML + pw + 24.0,
            MT + 9.0 + i as f64 * 16.0,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// Grouped bars on a log scale: one group per label, one bar per series.
pub fn log_bar_chart(
    title: &str,
    ylabel: &str,
    labels: &[&str],
    series: &[(String, Vec<f64>)],
) -> String {
    let vmax = series
        .iter()
        .flat_map(|s| s.1.iter().cloned())
        .fold(1.0, f64::max);
    let vmin = series
        .iter()
        .flat_map(|s| s.1.iter().cloned())
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min)
        .min(vmax);
    let lo = 10f64.powf(vmin.log10().floor());
    let hi = 10f64.powf(vmax.log10().ceil().max(lo.log10() + 1.0));
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let py = |v: f64| {
        let v = v.max(lo);
        MT + ph - (v.log10() - lo.log10()) / (hi.log10() - lo.log10()) * ph
    };
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11"><text x="{}" y="18" font-size="14" text-anchor="middle">{}</text>"#,
        ML + pw / 2.0,
        esc(title)
    );
    let mut d = lo;
    while d <= hi * 1.001 {
        let _ = write!(
            s,
            r##"<line x1="{ML}" x2="{0}" y1="{1}" y2="{1}" stroke="#ddd"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
            ML + pw,
            py(d),
            ML - 4.0,
            py(d) + 4.0,
            fmt_num(d)
        );
        d *= 10.0;
    }
    let groups = labels.len().max(1) as f64;
    let gw = pw / groups;
    let bw = (gw * 0.8) / series.len().max(1) as f64;
    for (g, l) in labels.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            ML + gw * (g as f64 + 0.5),
            MT + ph + 14.0,
            esc(l)
        );
    }
    for (i, (name, vals)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        for (g, &v) in vals.iter().enumerate() {
            let x = ML + gw * g as f64 + gw * 0.1 + bw * i as f64;
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{c}"><title>{}: {v:.2}</title></rect>"#,
                py(v),
                bw * 0.95,
                (MT + ph - py(v)).max(0.0),
                esc(name)
            );
        }
        let _ = write!(
            s,
            r#"<rect x="{}" y="{}" width="10" height="10" fill="{c}"/><text x="{}" y="{}">{}</text>"#,
            ML + pw + 10.0,
            MT + i as f64 * 16.0,
            ML + pw + 24.0,
            MT + 9.0 + i as f64 * 16.0,
            esc(name)
        );
    }
    let _ = write!(
        s,
        r##"<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#888"/><text transform="translate(14,{}) rotate(-90)" text-anchor="middle">{}</text></svg>"##,
        MT + ph / 2.0,
        esc(ylabel)
    );
    s
}

/// Renders one or more reports (several bindings side by side) as HTML.
pub fn render(reports: &[Report]) -> String {
    let mut h = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tern bench report</title>\
         <style>body{font-family:sans-serif;margin:2em;max-width:1000px}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}\
         td:first-child,td:nth-child(2){text-align:left}</style></head><body><h1>tern bench</h1>",
    );
    for r in reports.iter().take(1) {
        let _ = write!(h, "<p><code>{}</code></p>", esc(&r.command));
    }
    // Throughput and space over time, phases laid end to end per binding.
    let mut tput = Vec::new();
    let mut space = Vec::new();
    for r in reports {
        let mut off = 0.0;
        let mut tp = Vec::new();
        let mut sp = Vec::new();
        for p in &r.phases {
            for smp in &p.series {
                tp.push((off + smp.t, smp.ops_per_sec));
                sp.push((off + smp.t, smp.disk_bytes as f64 / (1u64 << 20) as f64));
            }
            off += p.runtime_sec;
        }
        tput.push((r.binding.clone(), tp));
        space.push((r.binding.clone(), sp));
    }
    h.push_str("<h2>Throughput over time</h2>");
    h.push_str(&line_chart(
        "Throughput (all phases, end to end)",
        "seconds",
        "ops/s",
        &tput,
    ));
    h.push_str("<h2>Space on disk over time</h2>");
    h.push_str(&line_chart("Space on disk", "seconds", "MiB", &space));
    // Latency percentiles per phase and operation.
    let labels = ["avg", "p90", "p99", "p99.9", "p99.99", "max"];
    let mut phases: Vec<(String, String)> = Vec::new();
    for r in reports {
        for p in &r.phases {
            for o in &p.ops {
                let key = (p.phase.clone(), o.op.clone());
                if !phases.contains(&key) {
                    phases.push(key);
                }
            }
        }
    }
    h.push_str("<h2>Latency percentiles</h2>");
    for (phase, op) in &phases {
        let mut series = Vec::new();
        for r in reports {
            if let Some(o) = r
                .phases
                .iter()
                .find(|p| &p.phase == phase)
                .and_then(|p| p.op(op))
            {
                series.push((
                    r.binding.clone(),
                    vec![
                        o.avg_us, o.p90_us, o.p99_us, o.p999_us, o.p9999_us, o.max_us,
                    ],
                ));
            }
        }
        h.push_str(&log_bar_chart(
            &format!("{phase}: {op} latency"),
            "µs (log)",
            &labels,
            &series,
        ));
    }
    // The five metrics as a table.
    h.push_str(
        "<h2>Metrics</h2><table><tr><th>phase</th><th>binding</th><th>ops/s</th><th>op</th><th>avg µs</th>\
         <th>p99 µs</th><th>p99.9 µs</th><th>p99.99 µs</th><th>disk</th><th>space amp</th><th>write amp</th>\
         <th>compaction read</th><th>compaction write</th><th>GC write</th><th>stall ms</th><th>settle s</th></tr>",
    );
    let opt = |v: Option<u64>| v.map_or("n/a".to_string(), bytes);
    for r in reports {
        for p in &r.phases {
            for (i, o) in p.ops.iter().enumerate() {
                let first = i == 0;
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&p.phase),
                    esc(&p.binding),
                    if first { format!("{:.0}", p.throughput) } else { String::new() },
                    esc(&o.op),
                    o.avg_us,
                    o.p99_us,
                    o.p999_us,
                    o.p9999_us,
                    if first { bytes(p.space.final_bytes) } else { String::new() },
                    if first { format!("{:.2}", p.space.space_amp) } else { String::new() },
                    match p.io.write_amp() {
                        Some(w) if first => format!("{w:.2}"),
                        _ => String::new(),
                    },
                    if first { opt(p.engine.compaction_read) } else { String::new() },
                    if first { opt(p.engine.compaction_write) } else { String::new() },
                    if first { opt(p.engine.gc_write) } else { String::new() },
                    if first {
                        p.engine.stall_micros.map_or("n/a".into(), |v| format!("{:.1}", v as f64 / 1000.0))
                    } else {
                        String::new()
                    },
                    if first { format!("{:.1}", p.settle_sec) } else { String::new() },
                );
            }
        }
    }
    h.push_str("</table></body></html>\n");
    h
}

/// Writes the HTML report for `reports` to `path`.
pub fn write(reports: &[Report], path: &Path) -> Result<()> {
    std::fs::write(path, render(reports))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg() {
        let s = line_chart("t", "x", "y", &[("a".into(), vec![(0.0, 1.0), (1.0, 3.0)])]);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        let b = log_bar_chart("t", "µs", &["p99"], &[("a".into(), vec![120.0])]);
        assert!(b.contains("<rect"));
        let html = render(&[]);
        assert!(html.contains("<html>") || html.contains("<html"));
    }
}
