//! Resolution at acceptance (SPEC §3.1): local days in the request's IANA timezone become a UTC
//! half-open interval; columns pass the role's policy; the deployment comes from the tenant.

use crate::auth::Role;
use crate::catalog::Report;
use crate::error::{AppError, FieldError};
use app::{ExportRequest, Preset, ResolvedContract, TimeRange};
use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// The resolved interval as instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// Inclusive start.
    pub from: Timestamp,
    /// Exclusive end.
    pub to: Timestamp,
}

fn bad(pointer: &str, detail: &str) -> AppError {
    AppError::InvalidRequest(vec![FieldError::new(pointer, detail)])
}

/// The first instant of a local day; a midnight that does not exist is the day's first instant.
fn start_of_day(day: Date, tz: &TimeZone) -> Result<Timestamp, AppError> {
    // The day's first instant: "compatible" picks the instant just after a gap at midnight.
    day.to_zoned(tz.clone())
        .map(|z| z.start_of_day().map(|s| s.timestamp()).unwrap_or(z.timestamp()))
        .map_err(|_| bad("/time_range", "the date is out of range"))
}

/// The local days `[first, end)` the request covers, given today's local date.
pub fn local_days(range: &TimeRange, today: Date) -> Result<(Date, Date), AppError> {
    let step = |d: Date, span: jiff::Span| d.checked_add(span).map_err(|_| bad("/time_range", "the date is out of range"));
    match range {
        TimeRange::Preset { preset: Preset::Yesterday } => Ok((step(today, (-1).days())?, today)),
        TimeRange::Preset { preset: Preset::Last7Days } => Ok((step(today, (-7).days())?, today)),
        TimeRange::Preset { preset: Preset::ThisMonth } => {
            let first = today.first_of_month();
            Ok((first, step(first, 1.month())?))
        }
        TimeRange::Dates { from, to } => {
            let from: Date = from.parse().map_err(|_| bad("/time_range/from", "expected a date YYYY-MM-DD"))?;
            let to: Date = to.parse().map_err(|_| bad("/time_range/to", "expected a date YYYY-MM-DD"))?;
            Ok((from, step(to, 1.day())?))
        }
    }
}

/// Resolves the interval of a request accepted at `now`.
pub fn resolve_interval(req: &ExportRequest, now: Timestamp) -> Result<Interval, AppError> {
    let tz = TimeZone::get(&req.timezone).map_err(|_| bad("/timezone", "not an IANA timezone"))?;
    let today = now.to_zoned(tz.clone()).date();
    let (first, end) = local_days(&req.time_range, today)?;
    Ok(Interval { from: start_of_day(first, &tz)?, to: start_of_day(end, &tz)? })
}

/// The columns of the file: those asked for, or every column the role may read.
pub fn resolve_columns(report: &Report, req: &ExportRequest, role: Role) -> Vec<String> {
    match &req.columns {
        Some(cols) => cols.clone(),
        None => report
            .columns
            .iter()
            .filter(|c| role.may_read_pii() || !c.pii)
            .map(|c| c.name.clone())
            .collect(),
    }
}

/// The whole resolved contract of a request.
pub fn resolve(
    report: &Report,
    req: &ExportRequest,
    role: Role,
    deployment: &str,
    now: Timestamp,
) -> Result<(ResolvedContract, Interval), AppError> {
    let interval = resolve_interval(req, now)?;
    let contract = ResolvedContract {
        from: crate::clock::rfc3339(interval.from.as_millisecond()),
        to: crate::clock::rfc3339(interval.to.as_millisecond()),
        timezone: req.timezone.clone(),
        columns: resolve_columns(report, req, role),
        deployment: deployment.to_owned(),
    };
    Ok((contract, interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn req(range: TimeRange, tz: &str) -> ExportRequest {
        let mut r = ExportRequest::new("orders");
        r.time_range = range;
        r.timezone = tz.to_owned();
        r
    }

    fn preset(p: Preset) -> TimeRange {
        TimeRange::Preset { preset: p }
    }

    #[test]
    fn yesterday_in_riyadh_late_evening_is_the_local_day_before() {
        // 20:30 UTC is 23:30 in Riyadh (UTC+3), still 2026-03-10 locally.
        let i = resolve_interval(&req(preset(Preset::Yesterday), "Asia/Riyadh"), at("2026-03-10T20:30:00Z")).unwrap();
        assert_eq!(i.from, at("2026-03-08T21:00:00Z"));
        assert_eq!(i.to, at("2026-03-09T21:00:00Z"));
    }

    #[test]
    fn last_7_days_and_this_month_cover_the_right_local_days() {
        let now = at("2026-03-10T12:00:00Z");
        let i = resolve_interval(&req(preset(Preset::Last7Days), "UTC"), now).unwrap();
        assert_eq!((i.from, i.to), (at("2026-03-03T00:00:00Z"), at("2026-03-10T00:00:00Z")));
        let i = resolve_interval(&req(preset(Preset::ThisMonth), "UTC"), now).unwrap();
        assert_eq!((i.from, i.to), (at("2026-03-01T00:00:00Z"), at("2026-04-01T00:00:00Z")));
    }

    #[test]
    fn explicit_dates_across_a_dst_change_in_berlin_are_local_midnights() {
        let r = req(TimeRange::Dates { from: "2026-03-28".into(), to: "2026-03-29".into() }, "Europe/Berlin");
        let i = resolve_interval(&r, at("2026-04-10T00:00:00Z")).unwrap();
        assert_eq!(i.from, at("2026-03-27T23:00:00Z"));
        assert_eq!(i.to, at("2026-03-29T22:00:00Z"));
    }

    #[test]
    fn a_local_midnight_that_does_not_exist_starts_at_the_days_first_instant() {
        // Chile moves clocks from 00:00 to 01:00 on the first Sunday of September (2026-09-06).
        let r = req(TimeRange::Dates { from: "2026-09-06".into(), to: "2026-09-06".into() }, "America/Santiago");
        let i = resolve_interval(&r, at("2026-10-01T00:00:00Z")).unwrap();
        assert_eq!(i.from, at("2026-09-06T04:00:00Z"));
        assert_eq!(i.to, at("2026-09-07T03:00:00Z"));
    }
}
