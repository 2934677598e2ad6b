use proptest::prelude::*;

use super::*;

/// A timestamp `minutes` after a fixed origin.
fn at(minutes: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + minutes * 60).unwrap()
}

fn window(from: i64, to: i64) -> Window {
    Window::new(at(from), at(to)).unwrap()
}

fn booking(name: &str, asked: i64, wants: Window, standing: Standing) -> Booking<'_> {
    Booking {
        name,
        asked: at(asked),
        wants,
        standing,
    }
}

#[test]
fn a_window_is_half_open_and_never_empty() {
    assert!(Window::new(at(1), at(1)).is_none());
    assert!(Window::new(at(2), at(1)).is_none());
    assert!(!window(0, 60).overlaps(&window(60, 120)));
    assert!(window(0, 61).overlaps(&window(60, 120)));
    assert!(window(0, 120).contains(&window(30, 60)));
    assert!(!window(30, 60).contains(&window(0, 120)));
}

#[test]
fn an_overlap_with_a_held_window_is_a_conflict_naming_it() {
    let verdicts = decide(&[
        booking("held", 0, window(60, 120), Standing::Holds(window(60, 120))),
        booking("late", 5, window(90, 150), Standing::New),
        booking("after", 5, window(120, 180), Standing::New),
    ]);
    assert_eq!(
        verdicts,
        [
            Verdict::Holds(window(60, 120)),
            Verdict::Conflict { with: "held" },
            Verdict::Holds(window(120, 180)),
        ]
    );
}

#[test]
fn a_held_window_is_not_displaced_by_one_asked_earlier_or_named_first() {
    let verdicts = decide(&[
        booking("b", 10, window(60, 120), Standing::Holds(window(60, 120))),
        booking("a", 0, window(60, 120), Standing::New),
    ]);
    assert_eq!(
        verdicts,
        [
            Verdict::Holds(window(60, 120)),
            Verdict::Conflict { with: "b" }
        ]
    );
}

#[test]
fn among_new_bookings_the_first_asked_wins_and_a_tie_goes_to_the_first_name() {
    let verdicts = decide(&[
        booking("zed", 0, window(60, 120), Standing::New),
        booking("amy", 0, window(90, 150), Standing::New),
        booking("early", -1, window(140, 160), Standing::New),
    ]);
    // "early" asked first and takes 140–160, so "amy" (90–150) is refused naming it; the
    // tie between "amy" and "zed" is then no contest: "zed" (60–120) fits.
    assert_eq!(
        verdicts,
        [
            Verdict::Holds(window(60, 120)),
            Verdict::Conflict { with: "early" },
            Verdict::Holds(window(140, 160)),
        ]
    );
    let tie = decide(&[
        booking("zed", 0, window(60, 120), Standing::New),
        booking("amy", 0, window(90, 150), Standing::New),
    ]);
    assert_eq!(
        tie,
        [
            Verdict::Conflict { with: "amy" },
            Verdict::Holds(window(90, 150)),
        ]
    );
}

#[test]
fn shortening_is_granted_and_frees_time_for_others() {
    let verdicts = decide(&[
        booking("cut", 0, window(60, 90), Standing::Holds(window(60, 180))),
        booking("next", 5, window(90, 180), Standing::New),
    ]);
    assert_eq!(
        verdicts,
        [
            Verdict::Holds(window(60, 90)),
            Verdict::Holds(window(90, 180))
        ]
    );
}

#[test]
fn lengthening_is_checked_like_a_new_booking_and_keeps_the_old_window_when_refused() {
    let verdicts = decide(&[
        booking("grow", 0, window(60, 150), Standing::Holds(window(60, 120))),
        booking(
            "other",
            5,
            window(130, 180),
            Standing::Holds(window(130, 180)),
        ),
        booking("free", 0, window(0, 50), Standing::Holds(window(10, 50))),
    ]);
    assert_eq!(
        verdicts,
        [
            Verdict::KeptShorter {
                holds: window(60, 120),
                with: "other"
            },
            Verdict::Holds(window(130, 180)),
            Verdict::Holds(window(0, 50)),
        ]
    );
}

#[test]
fn a_refusal_stands_until_the_spec_changes() {
    let verdicts = decide(&[booking("no", 0, window(60, 120), Standing::Refused)]);
    assert_eq!(verdicts, [Verdict::Refused]);
}

#[test]
fn the_stages_of_a_window_follow_the_clock_and_the_lock() {
    let t = Timeline::new(
        window(60, 120),
        SignedDuration::from_mins(30),
        SignedDuration::from_mins(5),
    );
    assert_eq!(t.stage(at(0), false), Stage::Booked);
    assert_eq!(t.stage(at(30), false), Stage::Draining);
    assert_eq!(t.stage(at(60), false), Stage::Draining);
    assert_eq!(t.stage(at(64), false), Stage::Draining);
    assert_eq!(t.stage(at(65), false), Stage::Late);
    assert_eq!(t.stage(at(64), true), Stage::Active);
    assert_eq!(t.stage(at(120), true), Stage::Over);
    assert_eq!(
        t.duties(at(29)),
        Duties {
            drain: false,
            lock: false
        }
    );
    assert_eq!(
        t.duties(at(30)),
        Duties {
            drain: true,
            lock: false
        }
    );
    assert_eq!(
        t.duties(at(60)),
        Duties {
            drain: true,
            lock: true
        }
    );
    assert_eq!(
        t.duties(at(120)),
        Duties {
            drain: false,
            lock: false
        }
    );
    assert_eq!(t.next_change(at(0)), Some(at(30)));
    assert_eq!(t.next_change(at(30)), Some(at(60)));
    assert_eq!(t.next_change(at(61)), Some(at(65)));
    assert_eq!(t.next_change(at(120)), None);
}

#[test]
fn a_drain_that_reaches_past_the_start_of_time_stops_at_its_edge() {
    let w = Window::new(Timestamp::MIN, at(0)).unwrap();
    let t = Timeline::new(w, SignedDuration::from_hours(1), SignedDuration::MAX);
    assert_eq!(t.drain_at, Timestamp::MIN);
    assert_eq!(t.late_at, Timestamp::MAX);
    let t = Timeline::new(w, SignedDuration::from_hours(-1), SignedDuration::ZERO);
    assert_eq!(t.drain_at, w.start());
}

// ---- properties ----

const NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

/// Up to eight bookings in a two-hour range with creation times in three seconds, so
/// overlaps and ties in creation time are the rule, not the exception.
fn bookings() -> impl Strategy<Value = Vec<(i64, i64, i64, bool)>> {
    prop::collection::vec(
        (0i64..120, 1i64..60, 0i64..3, any::<bool>()),
        0..=NAMES.len(),
    )
}

/// The flag says whether the booking later moves or stretches its window.
fn to_bookings(raw: &[(i64, i64, i64, bool)]) -> Vec<Booking<'static>> {
    raw.iter()
        .zip(NAMES)
        .map(|(&(from, len, asked, _), name)| Booking {
            name,
            asked: Timestamp::from_second(1_800_000_000 + asked).unwrap(),
            wants: window(from, from + len),
            standing: Standing::New,
        })
        .collect()
}

fn held<'a>(bookings: &[Booking<'a>], verdicts: &[Verdict<'a>]) -> Vec<(&'a str, Window)> {
    bookings
        .iter()
        .zip(verdicts)
        .filter_map(|(b, v)| v.held().map(|w| (b.name, w)))
        .collect()
}

fn assert_disjoint(windows: &[(&str, Window)]) -> Result<(), TestCaseError> {
    for (i, (a, wa)) in windows.iter().enumerate() {
        for (b, wb) in &windows[i + 1..] {
            prop_assert!(!wa.overlaps(wb), "{a} {wa:?} overlaps {b} {wb:?}");
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn held_windows_never_overlap_in_any_order(
        raw in bookings(),
        order in any::<u64>(),
    ) {
        let mut list = to_bookings(&raw);
        // The same set in another order: the verdicts must not depend on it.
        let first = decide(&list);
        let by_name: std::collections::BTreeMap<_, _> =
            list.iter().map(|b| b.name).zip(first.iter().copied()).collect();
        let len = list.len().max(1) as u64;
        list.rotate_left((order % len) as usize);
        list.reverse();
        let second = decide(&list);
        for (b, v) in list.iter().zip(&second) {
            prop_assert_eq!(by_name[b.name], *v, "{} decided differently in another order", b.name);
        }
        assert_disjoint(&held(&list, &second))?;
    }

    #[test]
    fn a_held_window_is_never_displaced_by_bookings_that_come_later(
        first in bookings(),
        later in bookings(),
    ) {
        let earlier = to_bookings(&first);
        let decided = decide(&earlier);
        // What was accepted now holds; the newcomers ask with any creation time (even an
        // earlier one) and names that may sort first.
        // Some owners also move or stretch what they hold: checked like a new booking.
        let mut all: Vec<Booking<'static>> = earlier
            .iter()
            .zip(&decided)
            .zip(&first)
            .map(|((b, v), &(from, len, _, moves))| Booking {
                standing: v.held().map_or(Standing::Refused, Standing::Holds),
                wants: if moves { window(from + len / 2, from + len * 2) } else { b.wants },
                ..*b
            })
            .collect();
        let newcomer_names = ["0", "1", "2", "3", "4", "5", "6", "7"];
        all.extend(to_bookings(&later).into_iter().zip(newcomer_names).map(|(b, name)| {
            Booking { name, ..b }
        }));
        let again = decide(&all);
        for ((b, v), &(.., moved)) in earlier.iter().zip(&decided).zip(&first) {
            if let (Some(w), false) = (v.held(), moved) {
                let now = again[all.iter().position(|x| x.name == b.name).unwrap()];
                prop_assert_eq!(now, Verdict::Holds(w), "{} was displaced", b.name);
            }
        }
        assert_disjoint(&held(&all, &again))?;
    }

    #[test]
    fn drain_precedes_lock_and_lock_precedes_release(
        from in -100_000i64..100_000,
        len in 1i64..100_000,
        drain in -1_000i64..10_000,
        grace in -1_000i64..10_000,
        probe in -200_000i64..300_000,
    ) {
        let w = window(from, from + len);
        let t = Timeline::new(w, SignedDuration::from_mins(drain), SignedDuration::from_mins(grace));
        prop_assert!(t.drain_at <= t.start && t.start < t.end && t.start <= t.late_at);
        let now = at(probe);
        let duties = t.duties(now);
        // The lock is never wanted without the drain, and both end together.
        prop_assert!(!duties.lock || duties.drain);
        prop_assert_eq!(duties.lock, matches!(t.stage(now, true), Stage::Active));
        if let Some(next) = t.next_change(now) {
            prop_assert!(next > now);
        }
    }
}
