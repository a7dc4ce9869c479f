//! `compactd tables` as time passes, on memory stores with injected
//! instants: each state that holds a table back says why and, where time
//! decides, until when (min-interval, a window, a schedule), and the
//! others (capped, refused, paused) say what holds them.

use super::tests::{apply, finish, n, pass, planner, stores, task_ids, write, HOUR, T0};
use super::view::{self, TableView};
use super::{at, define};

const MINUTE: u64 = 60_000;

async fn one(tree: &store::Store, wall_ms: u64) -> TableView {
    let mut bad = vec![];
    let mut views = view::tables(tree, usize::MAX, &mut bad, wall_ms).await.unwrap();
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(views.len(), 1, "{views:?}");
    views.remove(0)
}

#[tokio::test]
async fn a_partition_held_by_min_interval_says_when_it_is_due() {
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    // The helper's policy says min-interval = "0s"; this one holds 10 m.
    let text = "name = \"warehouse\"\ntables = [\"db/public/*\"]\nmin-small-files = 4\nmin-interval = \"10m\"\n";
    define::apply(&tree, super::spec::parse("w.toml", text).unwrap(), "test", T0).await.unwrap();
    write(&data, "t1", "p1", 4).await;
    let mut p = planner("n1");
    assert_eq!(pass(&mut p, &tree, &data, T0).await.submitted.len(), 1);
    finish(&tree, &task_ids(&tree).await[0]).await;
    // New small files a minute later: over the threshold, but compacted
    // less than 10 m ago.
    for i in 0..7 {
        data.put(&format!("db/public/t1/p1/g{i}.txt"), "row\n").await.unwrap();
    }
    let later = T0 + MINUTE;
    assert!(pass(&mut p, &tree, &data, later).await.submitted.is_empty());
    let v = one(&tree, later).await;
    let due = T0 + 10 * MINUTE;
    assert_eq!((v.status.state, v.status.until_wall_ms), ("min-interval", Some(due)), "{:?}", v.status);
    assert!(v.status.reason.contains(&format!("held by min-interval, the first due at {}", at(due))), "{:?}", v.status);
    assert_eq!(v.status.until.as_deref(), Some(at(due).as_str()));
    // Once the instant passed the planner submits it.
    assert_eq!(pass(&mut p, &tree, &data, due).await.submitted.len(), 1);
    assert_eq!(one(&tree, due).await.status.state, "compacting");
}

#[tokio::test]
async fn a_table_outside_its_window_says_when_it_opens_in_the_policys_zone() {
    let (tree, data) = stores().await;
    // 02:00-03:00 in Paris (UTC+1 in November): T0 is 02:00 there.
    apply(&tree, "windows = [\"02:00-03:00\"]\ntime-zone = \"Europe/Paris\"\n").await;
    write(&data, "t1", "p1", 4).await;
    let mut p = planner("n1");
    assert_eq!(pass(&mut p, &tree, &data, T0 + MINUTE).await.submitted.len(), 1);
    let v = one(&tree, T0 + MINUTE).await;
    assert_eq!(v.status.state, "compacting", "{:?}", v.status);
    let closed = T0 + HOUR + MINUTE;
    let v = one(&tree, closed).await;
    let opens = T0 + 24 * HOUR;
    assert_eq!((v.status.state, v.status.until_wall_ms), ("outside-windows", Some(opens)), "{:?}", v.status);
    let r = &v.status.reason;
    assert!(r.contains(&format!("opens at {}", at(opens))) && r.contains("02:00") && r.contains("Europe/Paris"), "{r}");
}

#[tokio::test]
async fn a_scheduled_policys_table_says_when_its_schedule_fires_next() {
    let (tree, data) = stores().await;
    apply(&tree, "schedule = \"0 2 * * *\"\n").await;
    write(&data, "t1", "p1", 4).await;
    let mut p = planner("n1");
    // 02:00:30 UTC: fired, planned.
    let fired = T0 + HOUR + 30_000;
    assert_eq!(pass(&mut p, &tree, &data, fired).await.submitted.len(), 1);
    finish(&tree, &task_ids(&tree).await[0]).await;
    assert!(pass(&mut p, &tree, &data, fired + MINUTE).await.submitted.is_empty());
    let v = one(&tree, fired + 2 * MINUTE).await;
    let next = T0 + 25 * HOUR;
    assert_eq!((v.status.state, v.status.until_wall_ms), ("waiting-for-schedule", Some(next)), "{:?}", v.status);
    assert!(v.status.reason.contains(&format!("next fire at {}", at(next))), "{:?}", v.status);
}

#[tokio::test]
async fn capped_refused_and_paused_tables_say_what_holds_them() {
    // Capped: its policy's max-units-per-table, with the due ones waiting.
    let (tree, data) = stores().await;
    apply(&tree, "max-units-per-table = 3").await;
    for i in 0..10 {
        write(&data, "t1", &format!("p{i:03}"), 4).await;
    }
    let mut p = planner("n1");
    assert_eq!(pass(&mut p, &tree, &data, T0).await.submitted.len(), 3);
    let v = one(&tree, T0).await;
    assert_eq!((v.status.state, v.status.until_wall_ms), ("capped", None), "{:?}", v.status);
    assert!(v.status.reason.contains("at its cap of 3 partitions at once (max-units-per-table): 7 due waiting"));

    // Paused: the policy's pause, whatever the summary.
    define::pause(&tree, &n("warehouse"), "test", T0).await.unwrap();
    let v = one(&tree, T0 + 1).await;
    assert!(v.paused && v.status.state == "paused", "{:?}", v.status);
    assert_eq!(v.status.reason, "policy warehouse is paused");

    // Refused: a folder the merge executor must not touch (a Delta log in
    // it) is shown with the refusal and never submitted.
    let (tree, data) = stores().await;
    apply(&tree, "").await;
    write(&data, "t1", "p1", 4).await;
    data.put("db/public/t1/_delta_log/00000000000000000000.json", "{}\n").await.unwrap();
    assert!(pass(&mut planner("n1"), &tree, &data, T0).await.submitted.is_empty());
    let v = one(&tree, T0).await;
    assert_eq!(v.status.state, "refused", "{:?}", v.status);
    assert!(v.status.reason.starts_with("refused: "), "{:?}", v.status);
}
