//! Tests of the wake-up ends: the rate bound, coalescing, own pokes, and
//! how pokes resolve through the view.

use super::*;
use layouts::formats::Member;

fn member(n: &str, addr: Option<&str>) -> Member {
    Member {
        node: NodeId::parse(n).unwrap(),
        incarnation: 1,
        session_timeout_ms: 1,
        commands: vec![],
        addr: addr.map(String::from),
        executor: None,
        executors: None,
        slots: None,
        layouts: None,
        draining: false,
    }
}

/// Members a (listening), b (the holder, listening) and c (listener off).
fn view() -> Lease {
    Lease {
        epoch: 1,
        holder: NodeId::parse("b").unwrap(),
        holder_incarnation: 1,
        renewal: 1,
        lease_ms: 1,
        wall_ms: 1,
        members: vec![member("a", Some("h:1")), member("b", Some("h:2")), member("c", None)],
        offline: vec![],
        last_event: 0,
        released: false,
        layout: None,
    }
}

#[test]
fn pokes_resolve_through_the_view_and_the_monitor_is_the_holder() {
    let view = view();
    let mut p = Pokes::default();
    p.work(&NodeId::parse("a").unwrap());
    p.work(&NodeId::parse("a").unwrap());
    p.work(&NodeId::parse("c").unwrap());
    p.work(&NodeId::parse("gone").unwrap());
    p.monitor();
    let r = p.resolve(Some(&view));
    let sends: Vec<(Scope, &str)> = r.sends.iter().map(|s| (s.scope, s.addr.as_str())).collect();
    assert_eq!(sends, vec![(Scope::Work, "h:1"), (Scope::Monitor, "h:2")]);
    assert_eq!(r.sends[0].work.as_ref().map(|n| n.as_str()), Some("a"), "a work poke names its node");
    assert_eq!(r.sends[1].work, None);
    assert_eq!(r.unknown, 1, "gone is not a member (c is, with its listener off)");
    let unreachable: Vec<&str> = r.unreachable.iter().map(|n| n.as_str()).collect();
    assert_eq!(unreachable, vec!["c", "gone"], "work pokes without an address are stamped");
    let none = p.resolve(None);
    assert_eq!((none.sends.len(), none.unknown, none.unreachable.len()), (0, 4, 3), "no view: nobody can be found");
}

#[test]
fn a_hint_is_sent_like_a_work_poke_and_never_stamped() {
    let view = view();
    let n = |s: &str| NodeId::parse(s).unwrap();
    let mut p = Pokes::default();
    p.hint(&n("a"));
    p.hint(&n("b"));
    p.work(&n("b"));
    p.hint(&n("c"));
    p.hint(&n("gone"));
    let r = p.resolve(Some(&view));
    let sends: Vec<(Scope, &str, Option<&str>)> =
        r.sends.iter().map(|s| (s.scope, s.addr.as_str(), s.work.as_ref().map(|n| n.as_str()))).collect();
    assert_eq!(
        sends,
        vec![(Scope::Work, "h:1", None), (Scope::Work, "h:2", Some("b"))],
        "one poke per node; a work poke's stamp wins over a hint's none"
    );
    assert!(r.unreachable.is_empty(), "hints are never stamped: {:?}", r.unreachable);
    assert_eq!(p.work_nodes(), vec![n("b")]);
    assert!(p.take_own(&n("a")), "a hint for this node is served in process");
    assert!(!p.take_own(&n("a")));
}

/// 20,000 pokes in 3 s (a forged flood) admit at most
/// `WOKEN_BURST + 3 × WOKEN_PER_SECOND` woken ticks; a quiet spell
/// refills the burst, at the rate.
#[test]
fn the_rate_bound_admits_a_burst_then_the_rate() {
    use crate::clock::Clock;
    let clock = crate::clock::ManualClock::new();
    let bound = RateBound::new(WOKEN_PER_SECOND, WOKEN_BURST);
    let mut admitted = 0;
    for _ in 0..20_000 {
        admitted += u32::from(bound.admit(clock.mono()).is_ok());
        clock.advance(Duration::from_micros(150));
    }
    assert_eq!(clock.mono(), Duration::from_secs(3));
    assert!(admitted <= WOKEN_BURST + 3 * WOKEN_PER_SECOND, "{admitted} admitted in 3 s");
    assert!(admitted >= 3 * WOKEN_PER_SECOND, "{admitted} admitted in 3 s: the rate is not kept");
    // Still flooded: at most one more now, then a wait of at most one
    // interval.
    let _ = bound.admit(clock.mono());
    let wait = bound.admit(clock.mono()).unwrap_err();
    assert!(wait <= Duration::from_secs(1) / WOKEN_PER_SECOND, "{wait:?}");
    // The burst refills at the rate.
    clock.advance(Duration::from_secs(1) / WOKEN_PER_SECOND * WOKEN_BURST);
    for i in 0..WOKEN_BURST {
        assert_eq!(bound.admit(clock.mono()), Ok(()), "burst admission {i} after a quiet spell");
    }
    assert!(bound.admit(clock.mono()).is_err());
}

#[tokio::test]
async fn a_bounded_wakeup_waits_for_the_rate_and_counts() {
    let clock = crate::clock::ManualClock::new();
    let w = Wakeup::bounded(clock.clone());
    for _ in 0..WOKEN_BURST {
        w.poke_from_peer(Scope::Work);
        w.poke_from_peer(Scope::Work);
        tokio::time::timeout(Duration::from_secs(5), w.notified()).await.expect("within the burst");
        assert!(w.take().has(Scope::Work));
    }
    // Over the burst, with the clock standing still: no wake-up.
    w.poke_from_peer(Scope::Monitor);
    assert!(tokio::time::timeout(Duration::from_millis(50), w.notified()).await.is_err());
    assert_eq!(w.counters.rate_limited.load(Ordering::Relaxed), 1);
    // The pending poke stays (a poll would take it); once the rate
    // allows, the next notification is admitted.
    clock.advance(Duration::from_secs(1) / WOKEN_PER_SECOND);
    w.poke_from_peer(Scope::Work);
    tokio::time::timeout(Duration::from_secs(5), w.notified()).await.expect("after the interval");
    let woken = w.take();
    assert!(woken.has(Scope::Work) && woken.has(Scope::Monitor));
    assert_eq!(w.counters.coalesced.load(Ordering::Relaxed), WOKEN_BURST as u64 + 1);
    // A permit whose scopes a poll took resolves nothing.
    w.poke_from_peer(Scope::Work);
    w.take();
    assert!(tokio::time::timeout(Duration::from_millis(20), w.notified()).await.is_err());
}

/// A node flooded by peers still hears its own executors end at once:
/// its own poke wakes it past a spent bound, and cuts short a wait for
/// the rate that had started; each one lets one wake-up through, no
/// more.
#[tokio::test]
async fn own_pokes_are_not_held_to_the_rate_bound_and_each_lets_one_through() {
    let clock = crate::clock::ManualClock::new();
    let w = Wakeup::bounded(clock.clone());
    for _ in 0..WOKEN_BURST {
        w.poke_from_peer(Scope::Work);
        tokio::time::timeout(Duration::from_secs(5), w.notified()).await.expect("within the burst");
        w.take();
    }
    for _ in 0..3 {
        w.poke(Scope::Work);
        tokio::time::timeout(Duration::from_secs(5), w.notified()).await.expect("an own poke, bound spent");
        assert!(w.take().has(Scope::Work));
    }
    // A peer's poke waits for the rate; an own poke meanwhile ends the wait.
    w.poke_from_peer(Scope::Monitor);
    let waiting = {
        let w = w.clone();
        tokio::spawn(async move { w.notified().await })
    };
    tokio::time::timeout(Duration::from_millis(50), async {
        while w.counters.rate_limited.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the peer's poke waits for the rate");
    assert!(!waiting.is_finished());
    w.poke(Scope::Work);
    tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("the own poke ends the wait").unwrap();
    let woken = w.take();
    assert!(woken.has(Scope::Work) && woken.has(Scope::Monitor));
    // Spent: the next peer poke waits again.
    w.poke_from_peer(Scope::Work);
    assert!(tokio::time::timeout(Duration::from_millis(50), w.notified()).await.is_err());
    // An own poke that a poll took (no woken tick served it) lets no later
    // peer's poke through either.
    w.take();
    w.poke(Scope::Work);
    assert!(w.take().has(Scope::Work));
    w.poke_from_peer(Scope::Work);
    assert!(tokio::time::timeout(Duration::from_millis(50), w.notified()).await.is_err());
}

#[test]
fn a_burst_of_pokes_is_one_wake_up_with_the_union_of_scopes() {
    let w = Wakeup::new();
    for _ in 0..1000 {
        w.poke(Scope::Work);
    }
    w.poke(Scope::Monitor);
    let woken = w.take();
    assert!(woken.has(Scope::Work) && woken.has(Scope::Monitor));
    assert!(w.take().is_empty());
    assert_eq!(w.counters.received.load(Ordering::Relaxed), 1001);
}
