//! When a schedule is due and which window each due time exports (SPEC §15), in the schedule's
//! timezone: a day there has 23, 24 or 25 hours, a month 28 to 31 days. A local `at` that does
//! not exist (a daylight-saving gap) is due at the gap's end; one that happens twice (a fold) is
//! due once, at its first instant.

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{Timestamp, ToSpan};

/// Which days a schedule is due on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Every {
    /// Every day.
    Day,
    /// One day a week.
    Week(Weekday),
    /// One day a month: the given day (1–28), or the last.
    Month(Option<i8>),
}

/// A schedule's due times: which days, at what local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    /// Which days.
    pub every: Every,
    /// The local time on each.
    pub at: Time,
}

/// The days a due time exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// The day before the due day.
    PreviousDay,
    /// The Monday-to-Sunday week before the due day's.
    PreviousWeek,
    /// The month before the due day's.
    PreviousMonth,
}

/// A window: its local days, and the instant it starts (the first day's local midnight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The first day.
    pub from: Date,
    /// The last day, included.
    pub to: Date,
    /// When the first day starts in the schedule's timezone.
    pub start: Timestamp,
}

impl Window {
    /// The start as the key writes it, `YYYY-MM-DDTHH:MM:SSZ`.
    pub fn start_text(&self) -> String {
        self.start.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }
}

impl Cadence {
    /// Whether `day` has a due time.
    pub fn due_on(&self, day: Date) -> bool {
        match self.every {
            Every::Day => true,
            Every::Week(weekday) => day.weekday() == weekday,
            Every::Month(Some(n)) => day.day() == n,
            Every::Month(None) => day == day.last_of_month(),
        }
    }

    /// The instant of `day`'s due time in `zone`.
    pub fn due_at(&self, day: Date, zone: &TimeZone) -> Timestamp {
        local_instant(day.to_datetime(self.at), zone)
    }

    /// The latest `n` due times after `after` and at or before `until`, oldest first, each with
    /// its local day.
    pub fn latest(&self, zone: &TimeZone, after: Timestamp, until: Timestamp, n: usize) -> Vec<(Timestamp, Date)> {
        let mut found = Vec::new();
        // A day after `until`'s local day cannot be due before it, nor one before `after`'s after it.
        let first = zone.to_datetime(after).date().yesterday().unwrap_or(Date::MIN);
        let mut day = zone.to_datetime(until).date().tomorrow().unwrap_or(Date::MAX);
        while found.len() < n && day >= first {
            if self.due_on(day) {
                let due = self.due_at(day, zone);
                if due > after && due <= until {
                    found.push((due, day));
                }
            }
            let Ok(before) = day.yesterday() else { break };
            day = before;
        }
        found.reverse();
        found
    }
}

/// A local date-time's instant in `zone`: in a gap, the gap's end; in a fold, the first.
fn local_instant(local: DateTime, zone: &TimeZone) -> Timestamp {
    let ambiguous = zone.to_ambiguous_timestamp(local);
    match ambiguous.offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(local).unwrap_or(Timestamp::MAX),
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(local).unwrap_or(Timestamp::MAX),
        AmbiguousOffset::Gap { before, .. } => {
            // Read with the offset before the gap, the time is past the transition; the
            // transition just before it is the gap's end.
            let past = before.to_timestamp(local).unwrap_or(Timestamp::MAX);
            zone.preceding(past).next().map_or(past, |t| t.timestamp())
        }
    }
}

impl WindowKind {
    /// The window a due time on local day `due_day` exports.
    pub fn window(&self, due_day: Date, zone: &TimeZone) -> Window {
        let (from, to) = match self {
            WindowKind::PreviousDay => {
                let day = due_day.yesterday().unwrap_or(due_day);
                (day, day)
            }
            WindowKind::PreviousWeek => {
                let monday = due_day.checked_sub((due_day.weekday().to_monday_zero_offset() as i64).days()).unwrap_or(due_day);
                let from = monday.checked_sub(7.days()).unwrap_or(monday);
                (from, monday.yesterday().unwrap_or(monday))
            }
            WindowKind::PreviousMonth => {
                let first = due_day.first_of_month();
                let last = first.yesterday().unwrap_or(first);
                (last.first_of_month(), last)
            }
        };
        let start = from.to_zoned(zone.clone()).map(|z| z.timestamp()).unwrap_or(Timestamp::MIN);
        Window { from, to, start }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::{date, time};

    fn new_york() -> TimeZone {
        TimeZone::get("America/New_York").unwrap()
    }

    fn utc(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_time_in_the_spring_gap_is_due_when_the_gap_ends() {
        let daily = Cadence { every: Every::Day, at: time(2, 30, 0, 0) };
        // 2026-03-08: 02:00 EST becomes 03:00 EDT, so 02:30 does not exist.
        assert_eq!(daily.due_at(date(2026, 3, 8), &new_york()), utc("2026-03-08T07:00:00Z"), "03:00 EDT, just after the gap");
        assert_eq!(daily.due_at(date(2026, 3, 9), &new_york()), utc("2026-03-09T06:30:00Z"), "02:30 EDT the day after");
        assert_eq!(daily.due_at(date(2026, 3, 7), &new_york()), utc("2026-03-07T07:30:00Z"), "02:30 EST the day before");
    }

    #[test]
    fn a_time_in_the_autumn_fold_is_due_once_at_its_first_instant() {
        let daily = Cadence { every: Every::Day, at: time(1, 30, 0, 0) };
        // 2026-11-01: 02:00 EDT becomes 01:00 EST, so 01:30 happens twice.
        let zone = new_york();
        assert_eq!(daily.due_at(date(2026, 11, 1), &zone), utc("2026-11-01T05:30:00Z"), "01:30 EDT, the first");
        let due = daily.latest(&zone, utc("2026-10-31T12:00:00Z"), utc("2026-11-01T12:00:00Z"), 5);
        assert_eq!(due, vec![(utc("2026-11-01T05:30:00Z"), date(2026, 11, 1))], "once, not twice");
    }

    #[test]
    fn a_previous_day_across_a_change_of_offset_starts_at_its_local_midnight() {
        let zone = new_york();
        let spring = WindowKind::PreviousDay.window(date(2026, 3, 9), &zone);
        assert_eq!((spring.from, spring.to), (date(2026, 3, 8), date(2026, 3, 8)));
        assert_eq!(spring.start_text(), "2026-03-08T05:00:00Z", "midnight EST, a 23-hour day");
        let autumn = WindowKind::PreviousDay.window(date(2026, 11, 2), &zone);
        assert_eq!(autumn.start_text(), "2026-11-01T04:00:00Z", "midnight EDT, a 25-hour day");
        let next = WindowKind::PreviousDay.window(date(2026, 11, 3), &zone);
        assert_eq!(next.start_text(), "2026-11-02T05:00:00Z");
    }

    #[test]
    fn months_end_on_their_last_day_whatever_its_number() {
        let zone = TimeZone::get("Asia/Riyadh").unwrap();
        let march = WindowKind::PreviousMonth.window(date(2026, 3, 1), &zone);
        assert_eq!((march.from, march.to), (date(2026, 2, 1), date(2026, 2, 28)));
        assert_eq!(march.start_text(), "2026-01-31T21:00:00Z", "midnight in Riyadh, UTC+3");
        let leap = WindowKind::PreviousMonth.window(date(2028, 3, 31), &zone);
        assert_eq!((leap.from, leap.to), (date(2028, 2, 1), date(2028, 2, 29)));
        let january = WindowKind::PreviousMonth.window(date(2027, 1, 15), &zone);
        assert_eq!((january.from, january.to), (date(2026, 12, 1), date(2026, 12, 31)), "across a year");
        let last = Cadence { every: Every::Month(None), at: time(6, 0, 0, 0) };
        let due: Vec<Date> = last.latest(&zone, utc("2027-12-31T03:00:00Z"), utc("2028-04-30T12:00:00Z"), 10).into_iter().map(|(_, d)| d).collect();
        assert_eq!(due, vec![date(2028, 1, 31), date(2028, 2, 29), date(2028, 3, 31), date(2028, 4, 30)]);
        let fifth = Cadence { every: Every::Month(Some(28)), at: time(6, 0, 0, 0) };
        assert!(fifth.due_on(date(2027, 2, 28)) && !fifth.due_on(date(2027, 3, 1)));
    }

    #[test]
    fn a_previous_week_is_the_monday_to_sunday_before_the_due_days_week() {
        let zone = new_york();
        // 2026-12-09 is a Wednesday.
        let week = WindowKind::PreviousWeek.window(date(2026, 12, 9), &zone);
        assert_eq!((week.from, week.to), (date(2026, 11, 30), date(2026, 12, 6)));
        let monday = WindowKind::PreviousWeek.window(date(2026, 12, 7), &zone);
        assert_eq!((monday.from, monday.to), (date(2026, 11, 30), date(2026, 12, 6)), "due on a Monday: the week just ended");
        let weekly = Cadence { every: Every::Week(Weekday::Monday), at: time(6, 0, 0, 0) };
        assert!(weekly.due_on(date(2026, 12, 7)) && !weekly.due_on(date(2026, 12, 8)));
    }

    #[test]
    fn the_latest_due_times_are_those_after_the_start_oldest_first_at_most_n() {
        let zone = TimeZone::UTC;
        let daily = Cadence { every: Every::Day, at: time(6, 0, 0, 0) };
        let due = daily.latest(&zone, utc("2026-12-01T06:00:00Z"), utc("2026-12-06T06:00:00Z"), 3);
        assert_eq!(due.iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>(), ["2026-12-04T06:00:00Z", "2026-12-05T06:00:00Z", "2026-12-06T06:00:00Z"]);
        let none = daily.latest(&zone, utc("2026-12-06T06:00:00Z"), utc("2026-12-07T05:59:59Z"), 3);
        assert!(none.is_empty(), "a due time at the start itself has run");
    }
}
