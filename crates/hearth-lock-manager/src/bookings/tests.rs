use super::*;
use hearth_api::ReservationSpec;
use hearth_api::conditions::find;
use pretty_assertions::assert_eq;

fn t(hhmm: &str) -> Timestamp {
    format!("2026-12-03T{hhmm}:00Z").parse().unwrap()
}

/// Reservation `name` of gpu-a for `from`–`to` (hh:mm on one day), asked at `asked`.
fn booking(name: &str, from: &str, to: &str, asked: &str) -> Reservation {
    let mut r = Reservation::new(
        name,
        ReservationSpec {
            cluster: "gpu-a".into(),
            owner: format!("owner-of-{name}"),
            start: Time(t(from)),
            end: Time(t(to)),
            drain_before: None,
            reason: None,
        },
    );
    r.metadata.creation_timestamp = Some(Time(t(asked)));
    r.metadata.generation = Some(1);
    r
}

const NOW: &str = "09:00";

/// Each reservation with the status it records.
fn planned_of(reservations: &[Reservation]) -> Vec<Planned<'_>> {
    reservations
        .iter()
        .map(|r| Planned {
            reservation: r,
            status: r.status.clone().unwrap_or_default(),
        })
        .collect()
}

/// Decides `reservations` with the status each records, and returns every status as it
/// is afterwards, written or not.
fn after(reservations: &[Reservation]) -> Vec<ReservationStatus> {
    after_at(reservations, NOW)
}

/// [`after`], deciding at `now` (hh:mm).
fn after_at(reservations: &[Reservation], now: &str) -> Vec<ReservationStatus> {
    let planned = planned_of(reservations);
    let mut statuses: Vec<ReservationStatus> = planned.iter().map(|p| p.status.clone()).collect();
    for decision in decide(&planned, t(now)) {
        statuses[decision.index] = decision.status;
    }
    statuses
}

/// `reservations` with the statuses [`after`] gave them: what the next reconcile reads.
fn recorded(mut reservations: Vec<Reservation>) -> Vec<Reservation> {
    let statuses = after(&reservations);
    for (r, s) in reservations.iter_mut().zip(statuses) {
        r.status = Some(s);
    }
    reservations
}

/// What its owner does to move `r`'s end to `to`: a new generation.
fn ends_at(r: &mut Reservation, to: &str) {
    r.spec.end = Time(t(to));
    r.metadata.generation = r.metadata.generation.map(|g| g + 1);
}

fn phase(status: &ReservationStatus) -> (Option<ReservationPhase>, Option<&str>) {
    (status.phase, status.conflicts_with.as_deref())
}

fn reason(status: &ReservationStatus) -> String {
    find(&status.conditions, ACCEPTED)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

#[test]
fn of_two_overlapping_bookings_the_earlier_asked_is_accepted() {
    let statuses = after(&[
        booking("late", "15:00", "17:00", "08:00"),
        booking("early", "14:00", "18:00", "07:00"),
    ]);
    assert_eq!(
        phase(&statuses[1]),
        (Some(ReservationPhase::Accepted), None)
    );
    assert_eq!(
        phase(&statuses[0]),
        (Some(ReservationPhase::Conflict), Some("early"))
    );
    assert_eq!(statuses[1].held_start, Some(Time(t("14:00"))));
    assert_eq!(statuses[1].held_end, Some(Time(t("18:00"))));
    assert_eq!(reason(&statuses[0]), "Conflict");
    let message = &find(&statuses[0].conditions, ACCEPTED).unwrap().message;
    assert!(message.contains("early"), "{message}");
    assert_eq!(statuses[0].observed_generation, Some(1));
}

#[test]
fn ties_in_creation_time_are_broken_by_name_whatever_the_order() {
    let a = booking("a", "14:00", "16:00", "08:00");
    let b = booking("b", "15:00", "17:00", "08:00");
    for order in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
        let statuses = after(&order);
        let of = |name: &str| {
            let i = order.iter().position(|r| r.name_any() == name).unwrap();
            phase(&statuses[i]).0
        };
        assert_eq!(of("a"), Some(ReservationPhase::Accepted));
        assert_eq!(of("b"), Some(ReservationPhase::Conflict));
    }
}

#[test]
fn windows_that_touch_do_not_overlap() {
    let statuses = after(&[
        booking("morning", "10:00", "14:00", "08:00"),
        booking("afternoon", "14:00", "18:00", "08:00"),
    ]);
    assert!(
        statuses
            .iter()
            .all(|s| s.phase == Some(ReservationPhase::Accepted))
    );
}

#[test]
fn an_accepted_booking_is_never_displaced_by_one_asked_earlier() {
    let held = recorded(vec![booking("zeta", "14:00", "18:00", "08:00")]);
    // Asked earlier and sorting earlier, but arriving after zeta was accepted.
    let mut all = held;
    all.push(booking("alpha", "15:00", "16:00", "07:00"));
    let statuses = after(&all);
    assert_eq!(phase(&statuses[0]).0, Some(ReservationPhase::Accepted));
    assert_eq!(
        phase(&statuses[1]),
        (Some(ReservationPhase::Conflict), Some("zeta"))
    );
}

#[test]
fn recorded_decisions_write_nothing() {
    let all = recorded(vec![
        booking("early", "14:00", "18:00", "07:00"),
        booking("late", "15:00", "17:00", "08:00"),
        booking("touching", "18:00", "19:00", "08:00"),
    ]);
    let planned = planned_of(&all);
    assert_eq!(decide(&planned, t(NOW)), vec![]);
}

#[test]
fn a_refusal_stands_until_its_owner_changes_the_spec() {
    let mut all = recorded(vec![
        booking("early", "14:00", "18:00", "07:00"),
        booking("late", "15:00", "17:00", "08:00"),
    ]);
    // The accepted one is cancelled: the refusal stays for the spec it answered.
    all.remove(0);
    assert_eq!(
        phase(&after(&all)[0]),
        (Some(ReservationPhase::Conflict), Some("early"))
    );
    // Its owner changes the spec (a new generation): decided again, and now free.
    all[0].metadata.generation = Some(2);
    let status = &after(&all)[0];
    assert_eq!(phase(status), (Some(ReservationPhase::Accepted), None));
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(reason(status), "Accepted");
}

#[test]
fn a_shortened_booking_frees_the_time_it_gave_back() {
    let mut all = recorded(vec![
        booking("early", "14:00", "18:00", "07:00"),
        booking("late", "16:00", "17:00", "08:00"),
    ]);
    ends_at(&mut all[0], "16:00");
    // The refused one is asked again once its owner edits it (here: the same end).
    ends_at(&mut all[1], "17:00");
    let statuses = after(&all);
    assert_eq!(statuses[0].held_end, Some(Time(t("16:00"))));
    assert_eq!(phase(&statuses[1]).0, Some(ReservationPhase::Accepted));
}

#[test]
fn a_longer_window_into_another_booking_keeps_the_one_held() {
    let mut all = recorded(vec![
        booking("early", "14:00", "16:00", "07:00"),
        booking("late", "16:00", "18:00", "08:00"),
    ]);
    ends_at(&mut all[0], "17:00");
    let statuses = after(&all);
    assert_eq!(
        phase(&statuses[0]),
        (Some(ReservationPhase::Accepted), Some("late"))
    );
    assert_eq!(statuses[0].held_end, Some(Time(t("16:00"))), "kept");
    assert_eq!(reason(&statuses[0]), "LengtheningRefused");
    assert_eq!(phase(&statuses[1]).0, Some(ReservationPhase::Accepted));
}

#[test]
fn a_window_the_crd_refuses_today_is_refused_and_blocks_nothing() {
    let statuses = after(&[
        booking("backwards", "18:00", "14:00", "07:00"),
        booking("fine", "15:00", "16:00", "08:00"),
    ]);
    assert_eq!(phase(&statuses[0]).0, Some(ReservationPhase::Conflict));
    assert_eq!(reason(&statuses[0]), "InvalidWindow");
    assert_eq!(phase(&statuses[1]).0, Some(ReservationPhase::Accepted));
}

#[test]
fn time_given_back_is_written_before_the_time_it_frees_is_taken() {
    let mut all = recorded(vec![
        booking("early", "14:00", "18:00", "07:00"),
        booking("late", "16:00", "17:00", "08:00"),
    ]);
    ends_at(&mut all[0], "16:00");
    ends_at(&mut all[1], "17:00");
    let planned = planned_of(&all);
    let decisions = decide(&planned, t(NOW));
    let gains: Vec<(usize, bool)> = decisions
        .iter()
        .map(|d| (d.index, d.gains(&planned)))
        .collect();
    // The shortened one holds less (no gain); the one accepted into the freed time gains.
    assert_eq!(gains, vec![(0, false), (1, true)]);
}

#[test]
fn a_flood_is_answered_with_bounded_work_the_last_asked_refused() {
    let minute = |m: usize| format!("{:02}:{:02}", 10 + m / 60, m % 60);
    let flood: Vec<Reservation> = (0..MAX_LIVE_BOOKINGS + 3)
        .map(|m| {
            let mut r = booking(&format!("b{m:03}"), &minute(m), &minute(m + 1), "08:00");
            // Asked one after another, in the order of their names.
            r.metadata.creation_timestamp =
                Some(Time(t("08:00") + std::time::Duration::from_secs(m as u64)));
            r
        })
        .collect();
    let statuses = after(&flood);
    let reasons: Vec<String> = statuses.iter().map(reason).collect();
    assert!(reasons[..MAX_LIVE_BOOKINGS].iter().all(|r| r == "Accepted"));
    assert_eq!(
        reasons[MAX_LIVE_BOOKINGS..],
        ["TooMany", "TooMany", "TooMany"]
    );
    assert_eq!(
        statuses[MAX_LIVE_BOOKINGS].phase,
        Some(ReservationPhase::Conflict)
    );
}

#[test]
fn an_ended_window_is_in_nobodys_way_and_left_as_recorded() {
    let mut all = recorded(vec![booking("over", "10:00", "11:00", "07:00")]);
    all.push(booking("past", "10:30", "11:30", "08:00"));
    all.push(booking("next", "10:30", "13:00", "08:00"));
    let planned = planned_of(&all);
    let decided: Vec<(usize, String)> = decide(&planned, t("12:00"))
        .into_iter()
        .map(|d| (d.index, d.reason.as_str().to_owned()))
        .collect();
    // "over" is not written again; a window that ended before it was decided is refused;
    // one that still runs does not collide with the ended one.
    assert_eq!(
        decided,
        [(1, "Ended".to_owned()), (2, "Accepted".to_owned())]
    );
}
