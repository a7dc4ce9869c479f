//! The status page's HTML: every page of [`super`]'s view, rendered with an
//! inline style and no script. Every value from the tree passes through
//! [`esc`] (text and attributes) or `seg` (URL path segments).

use std::fmt::Write as _;

use layouts::jobs::StepState;

use super::*;
use crate::jobs::instance::{JobView, StepView};
use crate::tasks::{SubtaskStatus, TaskStatus};

/// HTML-escapes text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a path segment for a link (ids and names are validated, but a
/// link never trusts that).
fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn time(wall_ms: Option<u64>) -> String {
    match wall_ms {
        Some(ms) => humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
            .to_string()
            .replace('T', " ")
            .replace('Z', " UTC"),
        None => "—".into(),
    }
}

fn ago(now: u64, then: Option<u64>) -> String {
    match then {
        Some(t) => format!("{:.1} s ago", now.saturating_sub(t) as f64 / 1000.0),
        None => "—".into(),
    }
}

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 20px}header a{color:#fff}
main{padding:10px 20px}h2{margin:22px 0 8px;font-size:17px}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:8px}
th,td{border-bottom:1px solid #e3e6ea;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef0f3;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;color:#fff;background:#7a8190}
.s-skewed{background:#c77700}
.s-Done,.s-Succeeded,.s-Success,.s-alive{background:#2e8b57}.s-Running,.s-Submitting{background:#2f6fd0}
.s-Failed,.s-offline{background:#c0392b}.s-Cancel,.s-Skipped,.s-left{background:#7a8190}
.s-Init,.s-Waiting,.s-Stop{background:#c98a12}.s-monitor{background:#6b3fa0}
.bar{width:160px;height:12px;background:#e3e6ea;border-radius:6px;overflow:hidden;display:inline-block;vertical-align:middle}
.bar span{display:block;height:100%;float:left}.bar .ok{background:#2e8b57}.bar .bad{background:#c0392b}
.muted{color:#7a8190}.problems{background:#fff4e5;border:1px solid #f0c36d;padding:6px 10px}
svg text{font:12px system-ui,sans-serif}
"#;

fn page(title: &str, body: &str, generated: Option<u64>, served_by: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t} · compactd</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><style>{STYLE}</style></head><body>\
         <header><a href=\"/\"><b>compactd</b></a> · {t} <span class=\"muted\">· served by {s} · {g}</span></header>\
         <main>{body}</main></body></html>",
        t = esc(title),
        s = esc(served_by),
        g = esc(&time(generated)),
    )
}

fn badge(state: &str) -> String {
    format!("<span class=\"badge s-{0}\" data-state=\"{0}\">{0}</span>", esc(state))
}

fn progress(units: u64, success: u64, failed: u64) -> String {
    let total = units.max(success + failed).max(1);
    let pct = |n: u64| n as f64 * 100.0 / total as f64;
    format!(
        "<span class=\"bar\" role=\"progressbar\" aria-valuemin=\"0\" aria-valuemax=\"{units}\" aria-valuenow=\"{done}\">\
         <span class=\"ok\" style=\"width:{:.1}%\"></span><span class=\"bad\" style=\"width:{:.1}%\"></span></span> \
         <span class=\"progress-text\">{done}/{units}</span>",
        pct(success),
        pct(failed),
        done = success + failed,
    )
}

fn subtasks_table(subs: &[SubtaskStatus], with_partition: bool) -> String {
    if subs.is_empty() {
        return "<p class=\"muted\">No outstanding subtasks.</p>".into();
    }
    let mut h = String::from("<table class=\"subtasks\"><tr><th>subtask</th>");
    if with_partition {
        h.push_str("<th>partition / shard</th>");
    }
    h.push_str("<th>node</th><th>state</th><th>round</th><th>attempt</th></tr>");
    for s in subs {
        let _ = write!(h, "<tr><td>{}</td>", esc(&s.id));
        if with_partition {
            let what = s.partition.clone().or(s.shard.map(|i| format!("shard {i}"))).unwrap_or_default();
            let _ = write!(h, "<td>{}</td>", esc(&what));
        }
        let _ = write!(
            h,
            "<td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&s.node),
            badge(s.state.as_str()),
            s.round,
            s.attempt
        );
    }
    h.push_str("</table>");
    h
}

fn step_state(s: StepState) -> String {
    format!("{s:?}")
}

/// The steps of a job drawn as a DAG: columns by depth (longest path from a
/// step without dependencies), arrows from each dependency, boxes coloured
/// by state. Pure SVG, no script.
pub fn dag_svg(steps: &[StepView]) -> String {
    let index: BTreeMap<&str, usize> = steps.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
    let mut depth = vec![0usize; steps.len()];
    // Longest path by relaxation; at most n rounds, so a cycle in bad data
    // cannot loop forever.
    for _ in 0..steps.len() {
        let mut changed = false;
        for (i, s) in steps.iter().enumerate() {
            for d in &s.dependent_steps {
                if let Some(&j) = index.get(d.as_str()) {
                    if depth[i] < depth[j] + 1 && depth[j] < steps.len() {
                        depth[i] = depth[j] + 1;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    let (w, h, gx, gy) = (150.0, 40.0, 60.0, 18.0);
    let mut row_of = vec![0usize; steps.len()];
    let mut rows: BTreeMap<usize, usize> = BTreeMap::new();
    for i in 0..steps.len() {
        let r = rows.entry(depth[i]).or_default();
        row_of[i] = *r;
        *r += 1;
    }
    let cols = depth.iter().max().map(|d| d + 1).unwrap_or(0);
    let max_rows = rows.values().max().copied().unwrap_or(0);
    let width = 10.0 + cols as f64 * (w + gx);
    let height = 10.0 + max_rows as f64 * (h + gy);
    let pos = |i: usize| (10.0 + depth[i] as f64 * (w + gx), 10.0 + row_of[i] as f64 * (h + gy));
    let colour = |s: StepState| match s {
        StepState::Succeeded => "#2e8b57",
        StepState::Running | StepState::Submitting => "#2f6fd0",
        StepState::Failed => "#c0392b",
        StepState::Waiting => "#c98a12",
        _ => "#7a8190",
    };
    let mut svg = format!(
        "<svg class=\"dag\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" role=\"img\"><defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" \
         refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" fill=\"#555\"/>\
         </marker></defs>"
    );
    for (i, s) in steps.iter().enumerate() {
        for d in &s.dependent_steps {
            if let Some(&j) = index.get(d.as_str()) {
                let (x1, y1) = pos(j);
                let (x2, y2) = pos(i);
                let _ = write!(
                    svg,
                    "<line class=\"edge\" data-from=\"{}\" data-to=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" \
                     stroke=\"#555\" marker-end=\"url(#arrow)\"/>",
                    esc(d.as_str()),
                    esc(s.name.as_str()),
                    x1 + w,
                    y1 + h / 2.0,
                    x2,
                    y2 + h / 2.0
                );
            }
        }
    }
    for (i, s) in steps.iter().enumerate() {
        let (x, y) = pos(i);
        let st = step_state(s.state);
        let _ = write!(
            svg,
            "<g class=\"step\" data-step=\"{n}\" data-state=\"{st}\"><rect x=\"{x}\" y=\"{y}\" width=\"{w}\" \
             height=\"{h}\" rx=\"6\" fill=\"{c}\"/><text x=\"{tx}\" y=\"{ty1}\" fill=\"#fff\" font-weight=\"600\">{n}</text>\
             <text x=\"{tx}\" y=\"{ty2}\" fill=\"#fff\">{st}</text><title>{n}: {st}</title></g>",
            n = esc(s.name.as_str()),
            st = esc(&st),
            c = colour(s.state),
            tx = x + 8.0,
            ty1 = y + 16.0,
            ty2 = y + 32.0,
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The overview page (`/`).
pub fn render_index(v: &ClusterView) -> String {
    let now = v.generated_wall_ms;
    let mut b = String::new();
    let alive = v.nodes.iter().filter(|n| n.alive).count();
    match &v.monitor {
        Some(m) => {
            let _ = write!(
                b,
                "<p id=\"cluster\">Monitor <b id=\"monitor\">{}</b> · epoch <b id=\"epoch\">{}</b> · renewal {}{} · \
                 <b>{alive}</b> of {} nodes alive · {} tasks under Scheduler/</p>",
                esc(&m.holder),
                m.epoch,
                m.renewal,
                if m.released { " (released)" } else { "" },
                v.nodes.len(),
                v.tasks_total
            );
        }
        None => b.push_str("<p id=\"cluster\">No monitor lease yet: no node has run here.</p>"),
    }
    if !v.problems.is_empty() {
        b.push_str("<div class=\"problems\"><b>Skipped (unreadable):</b><ul>");
        for p in &v.problems {
            let _ = write!(b, "<li>{}</li>", esc(p));
        }
        b.push_str("</ul></div>");
    }
    b.push_str(
        "<h2>Nodes</h2><table id=\"nodes\"><tr><th>node</th><th>state</th><th>incarnation</th><th>last heartbeat</th>\
         <th>session</th><th>address</th><th>version</th><th>fenced</th><th>clock skew</th></tr>",
    );
    // Now on the backend's clock: this node's wall clock minus its own skew.
    let own_skew = v.nodes.iter().find(|n| n.id == v.served_by).and_then(|n| n.clock_skew_ms).unwrap_or(0);
    let backend_now = (now as i64 - own_skew).max(0) as u64;
    for n in &v.nodes {
        let state = if n.declared_offline {
            "offline"
        } else if n.alive {
            "alive"
        } else {
            "left"
        };
        let _ = write!(
            b,
            "<tr class=\"node\" data-node=\"{id}\"><td>{id}</td><td>{}{}</td><td class=\"num\">{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            badge(state),
            [(n.monitor, "monitor"), (n.draining, "draining"), (n.behind_layout(), "old layout: upgrade it")]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, b)| format!(" {}", badge(b)))
                .collect::<String>(),
            n.incarnation.map(|i| i.to_string()).unwrap_or_default(),
            // On the backend's clock where known: the writer's and this
            // node's wall clocks may both be off (skews in the last column).
            esc(&ago(
                backend_now,
                n.last_beat_wall_ms.map(|w| (w as i64 - n.clock_skew_ms.unwrap_or(0)).max(0) as u64)
            )),
            n.session_timeout_ms.map(|s| format!("{} s", s / 1000)).unwrap_or_default(),
            esc(n.addr.as_deref().unwrap_or("")),
            esc(n.version.as_deref().unwrap_or("")),
            n.fenced_actions,
            match n.clock_skew_ms {
                Some(ms) if super::skew_flagged(n) => format!("{} {}", esc(&super::fmt_skew(ms)), badge("skewed")),
                Some(ms) => esc(&super::fmt_skew(ms)),
                None => String::new(),
            },
            id = esc(&n.id),
        );
    }
    b.push_str("</table>");
    let _ = write!(b, "<h2>Tasks</h2>");
    if v.tasks_total > v.tasks.len() {
        let _ = write!(b, "<p class=\"muted\">The newest {} of {} tasks.</p>", v.tasks.len(), v.tasks_total);
    }
    b.push_str(
        "<table id=\"tasks\"><tr><th>task</th><th>table</th><th>state</th><th>progress</th><th>manager</th>\
         <th>outstanding subtasks (node · state · attempt)</th><th>started</th></tr>",
    );
    for t in &v.tasks {
        let subs: Vec<String> = t
            .subtasks
            .iter()
            .take(12)
            .map(|s| format!("{} · {} · a{}", esc(&s.node), badge(s.state.as_str()), s.attempt))
            .collect();
        let more =
            if t.subtasks.len() > 12 { format!("<br>… {} more", t.subtasks.len() - 12) } else { String::new() };
        let _ = write!(
            b,
            "<tr class=\"task\" data-task=\"{id}\"><td><a href=\"/tasks/{link}\">{id}</a></td><td>{}</td><td>{}{}</td>\
             <td>{}</td><td>{}</td><td>{}{more}</td><td>{}</td></tr>",
            esc(&t.table),
            badge(t.state.as_str()),
            if let Some(e) = &t.error { format!("<br><span class=\"muted\">{}</span>", esc(e)) } else { String::new() },
            progress(t.units, t.success, t.failed),
            esc(t.manager.as_deref().unwrap_or("—")),
            subs.join("<br>"),
            esc(&time(t.started_wall_ms)),
            id = esc(&t.id),
            link = seg(&t.id),
        );
    }
    b.push_str("</table><h2>Jobs</h2>");
    if v.jobs.is_empty() {
        b.push_str("<p class=\"muted\">No job instances.</p>");
    }
    for j in &v.jobs {
        let _ = write!(
            b,
            "<div class=\"job\" data-job=\"{job}\" data-trigger=\"{trig}\"><p><a href=\"/jobs/{lj}/{lt}\"><b>{job}</b> / {trig}</a> \
             {} · version {} · created {}</p>{}</div>",
            badge(j.state.as_str()),
            j.job_version,
            esc(&time(Some(j.created_wall_ms))),
            dag_svg(&j.steps),
            job = esc(j.job.as_str()),
            trig = esc(j.trigger.as_str()),
            lj = seg(j.job.as_str()),
            lt = seg(j.trigger.as_str()),
        );
    }
    b.push_str("<h2>Tables</h2>");
    if v.tables.is_empty() {
        b.push_str("<p class=\"muted\">No table policies (<code>compactd policy apply</code>).</p>");
    } else {
        b.push_str(
            "<table id=\"tables\"><tr><th>table</th><th>policy</th><th>partitions</th><th>small files</th>\
             <th>small bytes</th><th>in flight</th><th>last compaction</th><th>what it changed</th>\
             <th>retention</th><th>checked</th><th>state</th></tr>",
        );
        for t in &v.tables {
            let s = &t.summary;
            let state = format!("{}: {}", t.status.state, t.status.reason);
            let _ = write!(
                b,
                "<tr data-table=\"{name}\" data-state=\"{st}\"><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&s.policy),
                s.partitions,
                s.small_files,
                s.small_bytes,
                s.in_flight,
                esc(&time(s.last_compaction_wall_ms)),
                esc(&t.last_compaction.as_ref().map(|c| c.describe()).unwrap_or_default()),
                esc(t.retention.as_deref().unwrap_or("")),
                esc(&time(Some(s.checked_wall_ms))),
                esc(&state),
                st = t.status.state,
                name = esc(&t.table),
            );
        }
        b.push_str("</table>");
    }
    b.push_str("<h2>Recent change events</h2><table id=\"events\"><tr><th>seq</th><th>time</th><th>epoch</th><th>by</th><th>event</th></tr>");
    for e in &v.events {
        let _ = write!(
            b,
            "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            e.seq,
            esc(&time(Some(e.wall_ms))),
            e.epoch,
            esc(&e.by),
            esc(&e.what)
        );
    }
    b.push_str("</table><h2>History (archived)</h2><table id=\"history\"><tr><th>task</th><th>table</th><th>state</th><th>success</th><th>failed</th><th>archived</th></tr>");
    for h in &v.history {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&h.id),
            esc(&h.table),
            badge(h.state.as_str()),
            h.success,
            h.failed,
            esc(&time(Some(h.archived_wall_ms)))
        );
    }
    b.push_str("</table><p class=\"muted\">Read-only. JSON: <a href=\"/api/cluster\">/api/cluster</a> · <a href=\"/metrics\">/metrics</a></p>");
    page("cluster", &b, Some(v.generated_wall_ms), &v.served_by)
}

/// A task's page (`/tasks/<id>`).
pub fn render_task(t: &TaskStatus, served_by: &str, wall_ms: u64) -> String {
    let mut b = String::new();
    let units = t.subtasks.len() as u64 + t.result.success + t.result.failed;
    let _ = write!(
        b,
        "<h2>Task {id}</h2><table id=\"task\" data-task=\"{id}\"><tr><th>table</th><td>{}.{}.{}</td></tr>\
         <tr><th>state</th><td>{}{}</td></tr><tr><th>progress</th><td>{}</td></tr><tr><th>manager</th><td>{} (term {})</td></tr>\
         <tr><th>round</th><td>{}</td></tr><tr><th>started</th><td>{}</td></tr><tr><th>finished</th><td>{}</td></tr>",
        esc(&t.db),
        esc(&t.schema),
        esc(&t.table),
        badge(t.state.as_str()),
        if t.stop_requested { " (stop requested)" } else { "" },
        progress(units, t.result.success, t.result.failed),
        esc(t.manager.as_deref().unwrap_or("—")),
        t.manager_term,
        t.round,
        esc(&time(t.started_wall_ms)),
        esc(&time(t.finished_wall_ms)),
        id = esc(&t.id.to_string()),
    );
    if let Some(e) = &t.error {
        let _ = write!(b, "<tr><th>error</th><td>{}</td></tr>", esc(e));
    }
    for (k, v) in &t.stats {
        let _ = write!(b, "<tr><th>{}</th><td class=\"num\">{v}</td></tr>", esc(k));
    }
    b.push_str("</table><h2>Outstanding subtasks</h2>");
    b.push_str(&subtasks_table(&t.subtasks, true));
    if !t.table_versions.is_empty() {
        b.push_str(
            "<h2>Table versions (Delta, Iceberg)</h2><table id=\"versions\"><tr><th>unit</th><th>partition</th>\
             <th>read</th><th>committed</th><th>snapshot read</th><th>snapshot committed</th><th>files in</th>\
             <th>files out</th><th>bytes in</th><th>bytes out</th><th>rows</th></tr>",
        );
        for v in &t.table_versions {
            let g = |k: &str| v.figure(k).to_string();
            let (snap_read, snap_after) = match v.snapshots() {
                Some((r, a)) => (r.to_string(), a.map(|a| a.to_string()).unwrap_or_else(|| "—".into())),
                None => (String::new(), String::new()),
            };
            let after = match (v.abandoned, v.version_after) {
                (true, Some(a)) => format!("abandoned (conflict at {a})"),
                (_, Some(a)) => a.to_string(),
                (_, None) => "—".into(),
            };
            let _ = write!(
                b,
                "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td></tr>",
                v.unit,
                esc(v.partition.as_deref().unwrap_or("")),
                v.version_before,
                esc(&after),
                snap_read,
                esc(&snap_after),
                g("files_in"),
                g("files_out"),
                g("bytes_in"),
                g("bytes_out"),
                g("rows_out"),
            );
        }
        b.push_str("</table>");
    }
    if !t.failures.is_empty() {
        b.push_str("<h2>Failed units</h2><table><tr><th>unit</th><th>error</th></tr>");
        for f in &t.failures {
            let _ = write!(
                b,
                "<tr><td class=\"num\">{}</td><td>{}</td></tr>",
                f.unit,
                esc(f.error.as_deref().unwrap_or(""))
            );
        }
        b.push_str("</table>");
    }
    page(&format!("task {}", t.id), &b, Some(wall_ms), served_by)
}

/// A job instance's page (`/jobs/<job>/<trigger>`).
pub fn render_job(j: &JobView, served_by: &str, wall_ms: u64) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<h2>Job {} / {}</h2><p>{} · version {} · created {} · finished {}</p>{}",
        esc(j.job.as_str()),
        esc(j.trigger.as_str()),
        badge(j.state.as_str()),
        j.job_version,
        esc(&time(Some(j.created_wall_ms))),
        esc(&time(j.finished_wall_ms)),
        dag_svg(&j.steps)
    );
    b.push_str("<table id=\"steps\"><tr><th>step</th><th>state</th><th>depends on</th><th>task</th><th>progress</th><th>reason</th></tr>");
    for s in &j.steps {
        let deps: Vec<&str> = s.dependent_steps.iter().map(|d| d.as_str()).collect();
        let task = match &s.task {
            Some(t) => format!("<a href=\"/tasks/{}\">{}</a>", seg(&t.to_string()), esc(&t.to_string())),
            None => "—".into(),
        };
        let prog = s.result.as_ref().map(|r| format!("{} ok, {} failed", r.success, r.failed)).unwrap_or_default();
        let _ = write!(
            b,
            "<tr class=\"step\" data-step=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{task}</td><td>{}</td><td>{}</td></tr>",
            esc(s.name.as_str()),
            esc(s.name.as_str()),
            badge(&step_state(s.state)),
            esc(&deps.join(", ")),
            esc(&prog),
            esc(s.reason.as_deref().unwrap_or(""))
        );
    }
    b.push_str("</table>");
    page(&format!("job {}/{}", j.job, j.trigger), &b, Some(wall_ms), served_by)
}

/// An error page: the message, escaped.
pub fn render_error(title: &str, message: &str, served_by: &str) -> String {
    page(title, &format!("<h2>{}</h2><p>{}</p>", esc(title), esc(message)), None, served_by)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_attributes() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(seg("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn an_error_message_from_the_tree_is_escaped_on_the_page() {
        let p = render_error("task", "<img src=x onerror=alert(1)>", "n1");
        assert!(!p.contains("<img"), "{p}");
        assert!(p.contains("&lt;img src=x onerror=alert(1)&gt;"));
    }
}
