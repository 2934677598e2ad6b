use super::*;

const NOW: usize = 0;
const LATER: usize = 1;

/// A ledger of `bound` keys: lane `NOW` without a cap, lane `LATER` two at a time.
fn ledger(bound: usize) -> Ledger<&'static str, u32> {
    Ledger::new(bound, &[usize::MAX, 2])
}

fn taken(ledger: &mut Ledger<&'static str, u32>) -> Vec<(&'static str, u32)> {
    std::iter::from_fn(|| ledger.take()).collect()
}

/// A ledger of `bound` keys with write 0 handed over for each of `keys`, in its lane.
fn handed(bound: usize, keys: &[(&'static str, usize)], now: Instant) -> Ledger<&'static str, u32> {
    let mut ledger = ledger(bound);
    for &(key, lane) in keys {
        assert_eq!(ledger.submit(key, 0, lane, now), Submitted::Queued);
    }
    ledger
}

/// `a` handed over as 1, taken by a writer, and ended with `outcome`.
fn a_ended(outcome: Outcome, now: Instant) -> Ledger<&'static str, u32> {
    let mut ledger = ledger(10);
    ledger.submit("a", 1, NOW, now);
    assert_eq!(ledger.take(), Some(("a", 1)));
    assert_eq!(ledger.finish(&"a", outcome, now), None);
    ledger
}

fn stage<'a>(ledger: &'a Ledger<&'static str, u32>, key: &'static str) -> Option<&'a Stage> {
    ledger.get(&key).map(|(_, stage)| stage)
}

#[test]
fn a_newer_write_replaces_the_waiting_one() {
    let now = Instant::now();
    let mut ledger = ledger(10);
    assert_eq!(ledger.submit("a", 1, NOW, now), Submitted::Queued);
    assert_eq!(ledger.submit("a", 1, NOW, now), Submitted::Known);
    assert_eq!(ledger.submit("a", 2, NOW, now), Submitted::Replaced);
    assert_eq!(taken(&mut ledger), [("a", 2)], "one write, the newest");
}

#[test]
fn a_write_handed_over_during_the_write_follows_it_in_the_same_slot() {
    let now = Instant::now();
    let mut ledger = ledger(10);
    ledger.submit("a", 1, NOW, now);
    assert_eq!(ledger.take(), Some(("a", 1)));
    assert_eq!(ledger.submit("a", 1, NOW, now), Submitted::Known);
    assert_eq!(ledger.submit("a", 2, NOW, now), Submitted::Replaced);
    assert_eq!(ledger.take(), None, "not twice at once");
    let written = Outcome::Written(Some("7".into()));
    assert_eq!(ledger.finish(&"a", written, now), Some(2));
    assert_eq!(ledger.finish(&"a", Outcome::Written(None), now), None);
    assert_eq!(
        stage(&ledger, "a"),
        Some(&Stage::Written {
            version: None,
            at: now
        })
    );
}

#[test]
fn earlier_lanes_go_first_and_a_lane_keeps_its_cap() {
    let now = Instant::now();
    let waiting = [("w1", LATER), ("w2", LATER), ("w3", LATER)];
    let mut ledger = handed(10, &waiting, now);
    ledger.submit("u", 0, NOW, now);
    assert_eq!(taken(&mut ledger), [("u", 0), ("w1", 0), ("w2", 0)]);
    ledger.finish(&"w1", Outcome::Written(None), now);
    assert_eq!(
        taken(&mut ledger),
        [("w3", 0)],
        "a later slot is free again"
    );
}

#[test]
fn a_write_moving_lane_is_taken_from_its_new_lane() {
    let now = Instant::now();
    let mut ledger = handed(10, &[("a", LATER), ("b", LATER), ("c", LATER)], now);
    assert_eq!(ledger.submit("c", 1, NOW, now), Submitted::Replaced);
    assert_eq!(taken(&mut ledger), [("c", 1), ("a", 0), ("b", 0)]);
}

#[test]
fn a_written_key_is_remembered_until_let_go() {
    let now = Instant::now();
    let mut ledger = a_ended(Outcome::Written(Some("7".into())), now);
    assert_eq!(ledger.submit("a", 1, NOW, now), Submitted::Known);
    assert!(!ledger.busy());
    // The cache does not show version 7 yet.
    ledger.retain(|_, _, stage| !matches!(stage, Stage::Written { version, .. } if version.as_deref() == Some("8")));
    assert!(ledger.contains(&"a"));
    ledger.retain(|_, _, stage| !matches!(stage, Stage::Written { version, .. } if version.as_deref() == Some("7")));
    assert!(!ledger.contains(&"a"), "shown: forgotten");
    assert_eq!(ledger.submit("a", 1, NOW, now), Submitted::Queued);
}

#[test]
fn a_different_write_after_the_written_one_is_queued() {
    let now = Instant::now();
    let mut ledger = a_ended(Outcome::Written(None), now);
    assert_eq!(ledger.submit("a", 2, NOW, now), Submitted::Queued);
    assert_eq!(taken(&mut ledger), [("a", 2)]);
}

#[test]
fn a_failed_write_is_asked_again_only_once_due() {
    let now = Instant::now();
    let retry_at = now + Duration::from_secs(1);
    let mut ledger = a_ended(Outcome::Failed { retry_at }, now);
    assert_eq!(ledger.submit("a", 1, NOW, now), Submitted::Known);
    assert_eq!(ledger.take(), None);
    assert_eq!(ledger.submit("a", 1, NOW, retry_at), Submitted::Queued);
    assert_eq!(taken(&mut ledger), [("a", 1)]);
    // A different write does not wait for the backoff of the old one.
    ledger.finish(&"a", Outcome::Failed { retry_at }, now);
    assert_eq!(ledger.submit("a", 2, NOW, now), Submitted::Queued);
}

#[test]
fn a_key_found_gone_is_forgotten_unless_a_newer_write_waits() {
    let now = Instant::now();
    let mut ledger = a_ended(Outcome::Gone, now);
    assert!(!ledger.contains(&"a"));

    ledger.submit("a", 1, NOW, now);
    ledger.take();
    ledger.submit("a", 2, NOW, now);
    assert_eq!(
        ledger.finish(&"a", Outcome::Gone, now),
        Some(2),
        "for the successor"
    );
    assert_eq!(ledger.finish(&"a", Outcome::Dropped, now), None);
    assert!(!ledger.contains(&"a"));
}

#[test]
fn a_dropped_write_frees_its_slot() {
    let now = Instant::now();
    let mut ledger = handed(10, &[("w1", LATER), ("w2", LATER), ("w3", LATER)], now);
    assert_eq!(taken(&mut ledger).len(), 2);
    ledger.finish(&"w1", Outcome::Dropped, now);
    assert_eq!(taken(&mut ledger), [("w3", 0)]);
}

#[test]
fn keys_in_flight_are_kept_whatever_retain_says() {
    let now = Instant::now();
    let mut ledger = ledger(10);
    ledger.submit("a", 1, NOW, now);
    ledger.submit("b", 1, NOW, now);
    ledger.take();
    ledger.retain(|_, _, _| false);
    assert!(ledger.contains(&"a"));
    assert!(!ledger.contains(&"b"));
    assert_eq!(ledger.take(), None, "b's place in line went with it");
}

#[test]
fn at_the_bound_the_oldest_waiting_write_of_the_last_lane_makes_room() {
    let now = Instant::now();
    let mut ledger = handed(3, &[("u", NOW), ("w1", LATER), ("w2", LATER)], now);
    assert_eq!(ledger.submit("x", 0, NOW, now), Submitted::Queued);
    assert!(!ledger.contains(&"w1"), "the oldest of the last lane");
    assert_eq!(ledger.take_dropped(), 1);
    assert_eq!(ledger.take_dropped(), 0, "counted once");
    assert_eq!(taken(&mut ledger), [("u", 0), ("x", 0), ("w2", 0)]);
    // Nothing waits: a new key is refused, the remembered ones kept.
    assert_eq!(ledger.submit("y", 0, NOW, now), Submitted::Refused);
    assert_eq!(ledger.take_dropped(), 1);
    assert_eq!(ledger.iter().count(), 3);
}

#[test]
fn remembering_a_write_made_elsewhere_and_forgetting_it_with_age() {
    let now = Instant::now();
    let mut ledger: Ledger<&str, ()> = Ledger::new(10, &[usize::MAX]);
    ledger.remember("uid-1", (), now);
    assert!(matches!(
        stage_of(&ledger, "uid-1"),
        Some(Stage::Written { .. })
    ));
    assert_eq!(ledger.take(), None, "nothing to write");
    let age = Duration::from_secs(600);
    ledger.retain(|_, _, stage| !stage.written_long_ago(now, age));
    assert!(ledger.contains(&"uid-1"));
    ledger.age(age);
    ledger.retain(|_, _, stage| !stage.written_long_ago(now, age));
    assert!(!ledger.contains(&"uid-1"));
}

fn stage_of<'a>(ledger: &'a Ledger<&'static str, ()>, key: &'static str) -> Option<&'a Stage> {
    ledger.get(&key).map(|(_, stage)| stage)
}
