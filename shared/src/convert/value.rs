//! Exact reading of the values whose Arrow readers would silently change them.
//!
//! arrow-csv and arrow-json read a decimal with more fraction digits than the column's
//! scale by rounding it (`1.005` in `decimal(12,2)` → 1.01), a timestamp with
//! nanoseconds by truncating it to microseconds, a date-time in a `date` column by
//! dropping its time of day (after moving it to UTC, so `2024-01-02T23:30-05:00` becomes
//! 2024-01-03), and a number too large for a float as infinity; arrow-json also
//! truncates a fractional number in an integer column (`1.5` → 1) and reads a number in a
//! `date` or `timestamp` column as days or microseconds since the epoch. The converter
//! refuses all of these: a value is either stored exactly or it is an error naming its
//! line and column. The functions here decide, and their `Err` is the message that
//! follows `column "NAME": `.

use arrow_array::types::Date32Type;
use arrow_cast::parse::{Parser, string_to_datetime};
use chrono::Utc;

use crate::schema::{ColumnType, TimeFormat, Zone};

/// Why a text is not an exact decimal of the column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DecimalError {
    /// Not a number at all.
    Invalid,
    /// More fraction digits than the scale, not all zero: storing it would round it.
    Rounded,
    /// More integer digits than the precision leaves room for.
    Overflow,
}

/// Largest exponent magnitude worth computing with: beyond it a non-zero value fits no
/// `Decimal128` and needs more than 38 fraction digits.
const MAX_EXPONENT: i64 = 1_000;

/// Reads `text` (ASCII whitespace around it ignored) as a `decimal(precision, scale)`
/// value: `[+-]digits[.digits][(e|E)[+-]digits]`, with at least one digit before or after
/// the point. Returns the unscaled value, exactly, or why there is none: extra fraction
/// digits are accepted only when they are zeros (`1.500` in `decimal(12,2)` is 1.50).
pub(super) fn decimal(text: &str, precision: u8, scale: u8) -> Result<i128, DecimalError> {
    match short_decimal(text.as_bytes(), precision, scale) {
        Some(value) => Ok(value),
        None => any_decimal(text, precision, scale),
    }
}

/// A number spelled `-?digits[.digits]`, cut at its sign and point (either side of the point
/// may be empty); the fast paths of [`decimal`] and of the JSON decoder's floats read it.
pub(super) struct PlainNumber<'a> {
    pub(super) negative: bool,
    pub(super) int: &'a [u8],
    /// The digits after the point, `None` without a point.
    pub(super) frac: Option<&'a [u8]>,
}

impl<'a> PlainNumber<'a> {
    /// `None` when `text` has any other byte, or nothing.
    #[inline(always)]
    pub(super) fn new(text: &'a [u8]) -> Option<Self> {
        let (negative, digits) = match text.split_first()? {
            (b'-', rest) => (true, rest),
            _ => (false, text),
        };
        let (int, frac) = match digits.iter().position(|&b| b == b'.') {
            Some(p) => (&digits[..p], Some(&digits[p + 1..])),
            None => (digits, None),
        };
        let frac_digits = frac.unwrap_or_default();
        // Two loops rather than a chain of both: a chain's fold is not always inlined.
        (int.iter().all(u8::is_ascii_digit) && frac_digits.iter().all(u8::is_ascii_digit))
            .then_some(Self {
                negative,
                int,
                frac,
            })
    }

    /// The digits after the point (none without one).
    #[inline(always)]
    pub(super) fn frac_digits(&self) -> &'a [u8] {
        self.frac.unwrap_or_default()
    }

    /// How many digits it has, before and after the point.
    #[inline(always)]
    pub(super) fn count(&self) -> usize {
        self.int.len() + self.frac_digits().len()
    }

    /// Its digits as one whole number, the point ignored; only for at most 19 digits.
    #[inline(always)]
    pub(super) fn mantissa(&self) -> u64 {
        let digits = |v: u64, s: &[u8]| s.iter().fold(v, |v, &d| v * 10 + u64::from(d - b'0'));
        digits(digits(0, self.int), self.frac_digits())
    }
}

/// The common spelling `-?digits[.digits]`, at most 18 digits and no more after the point
/// than the scale, read in an `i64`, as [`any_decimal`] reads it; `None` for anything else
/// (and for a value too large for the type, whose error [`any_decimal`] gives).
fn short_decimal(text: &[u8], precision: u8, scale: u8) -> Option<i128> {
    let number = PlainNumber::new(text)?;
    let fraction = number.frac_digits().len();
    let count = number.count();
    if count == 0 || count > 18 || fraction > usize::from(scale) {
        return None;
    }
    let value = number.mantissa();
    if value == 0 {
        return Some(0);
    }
    let zeros = u32::from(scale) - fraction as u32;
    if value.ilog10() + 1 + zeros > u32::from(precision) {
        return None;
    }
    let value = i128::from(value) * 10i128.pow(zeros);
    Some(if number.negative { -value } else { value })
}

/// [`decimal`] for any spelling.
fn any_decimal(text: &str, precision: u8, scale: u8) -> Result<i128, DecimalError> {
    let s = text.trim_ascii().as_bytes();
    let (negative, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let digits_in = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let (int, rest) = s.split_at(digits_in(s));
    let (frac, rest) = match rest.split_first() {
        Some((b'.', rest)) => rest.split_at(digits_in(rest)),
        _ => (&[][..], rest),
    };
    if int.is_empty() && frac.is_empty() {
        return Err(DecimalError::Invalid);
    }
    let exponent = match rest.split_first() {
        None => 0,
        Some((b'e' | b'E', rest)) => {
            let (negative, digits) = match rest.split_first() {
                Some((b'-', digits)) => (true, digits),
                Some((b'+', digits)) => (false, digits),
                _ => (false, rest),
            };
            if digits.is_empty() || digits_in(digits) != digits.len() {
                return Err(DecimalError::Invalid);
            }
            let magnitude = digits.iter().fold(0i64, |e, d| {
                (e * 10 + i64::from(d - b'0')).min(MAX_EXPONENT)
            });
            if negative { -magnitude } else { magnitude }
        }
        Some(_) => return Err(DecimalError::Invalid),
    };
    let digit = |i: usize| match int.get(i) {
        Some(d) => d - b'0',
        None => frac[i - int.len()] - b'0',
    };
    let n = int.len() + frac.len();
    let Some(first) = (0..n).find(|&i| digit(i) != 0) else {
        return Ok(0);
    };
    // The unscaled value is the digits times 10^shift.
    let shift = exponent - frac.len() as i64 + i64::from(scale);
    let (end, zeros) = if shift < 0 {
        let dropped = usize::try_from(-shift).unwrap_or(usize::MAX);
        if dropped > n - first - 1 || (n - dropped..n).any(|i| digit(i) != 0) {
            return Err(DecimalError::Rounded);
        }
        (n - dropped, 0)
    } else {
        (n, usize::try_from(shift).unwrap_or(usize::MAX))
    };
    if (end - first).saturating_add(zeros) > usize::from(precision) {
        return Err(DecimalError::Overflow);
    }
    // At most `precision` ≤ 38 digits: no overflow of i128.
    let value =
        (first..end).fold(0i128, |v, i| v * 10 + i128::from(digit(i))) * 10i128.pow(zeros as u32);
    Ok(if negative { -value } else { value })
}

/// The message for a `decimal` value that `decimal` refused.
pub(super) fn decimal_message(shown: &str, ty: ColumnType, e: DecimalError) -> String {
    let ColumnType::Decimal { precision, scale } = ty else {
        return format!("cannot parse {shown} as {ty}");
    };
    match e {
        DecimalError::Invalid => format!("cannot parse {shown} as {ty}"),
        DecimalError::Rounded if scale == 0 => {
            format!("cannot parse {shown} as {ty}: it is not a whole number and would be rounded")
        }
        DecimalError::Rounded => format!(
            "cannot parse {shown} as {ty}: it has more than {scale} digits after the point and would be rounded"
        ),
        DecimalError::Overflow => format!(
            "cannot parse {shown} as {ty}: it has more than {} digits before the point",
            i16::from(precision) - i16::from(scale)
        ),
    }
}

/// Reads a JSON number literal as a whole number of an integer column whose values lie in
/// `[min, max]`: `1`, `1.0` and `1e3` are whole, `1.5` is not (arrow-json would truncate it).
pub(super) fn whole_number(
    literal: &str,
    ty: ColumnType,
    min: i128,
    max: i128,
) -> Result<i128, String> {
    if let Some(v) = short_integer(literal).or_else(|| literal.parse::<i64>().ok()) {
        return match i128::from(v) {
            v if (min..=max).contains(&v) => Ok(v),
            _ => Err(format!("cannot parse {literal} as {ty}: out of range")),
        };
    }
    match decimal(literal, 38, 0) {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        Ok(_) | Err(DecimalError::Overflow) => {
            Err(format!("cannot parse {literal} as {ty}: out of range"))
        }
        Err(DecimalError::Rounded) => Err(format!(
            "cannot parse {literal} as {ty}: it is not a whole number"
        )),
        Err(DecimalError::Invalid) => Err(format!("cannot parse {literal} as {ty}")),
    }
}

/// `-?[0-9]{1,18}` read as `str::parse::<i64>` reads it, without its overflow checks
/// (18 digits cannot overflow); `None` for anything else.
pub(super) fn short_integer(literal: &str) -> Option<i64> {
    let (negative, digits) = match literal.as_bytes().split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, literal.as_bytes()),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let magnitude = digits.iter().try_fold(0i64, |v, &d| {
        d.is_ascii_digit().then(|| v * 10 + i64::from(d - b'0'))
    })?;
    Some(if negative { -magnitude } else { magnitude })
}

/// Reads `text` as a date: what arrow-cast reads as a date (`2024-01-02`, `20240102`,
/// `+10999-12-31`), but not a date-time, whose time of day (and offset) would be dropped.
pub(super) fn date(text: &str) -> Result<i32, String> {
    // The common spelling, read without arrow-cast's general parser (which reads the same).
    if text.len() == 10
        && let Some(days) = ymd_days(text.as_bytes())
    {
        return i32::try_from(days).map_err(|_| format!("cannot parse {} as date", Quoted(text)));
    }
    let t = text.trim_ascii();
    if t.len() > 10 && !t.starts_with(['+', '-']) && string_to_datetime(&Utc, t).is_ok() {
        return Err(format!(
            "cannot parse {} as date: it has a time of day (declare the column as timestamp)",
            Quoted(text)
        ));
    }
    Date32Type::parse(text).ok_or_else(|| format!("cannot parse {} as date", Quoted(text)))
}

/// Reads `text` as an instant in microseconds since the epoch: RFC 3339 with any offset,
/// or naive (read as UTC), as arrow-cast reads it; digits below the microsecond are an
/// error unless they are zeros.
pub(super) fn timestamp(text: &str) -> Result<i64, String> {
    if let Some(micros) = utc_micros(text.as_bytes()) {
        return Ok(micros);
    }
    let at = string_to_datetime(&Utc, text)
        .map_err(|_| format!("cannot parse {} as timestamp", Quoted(text)))?;
    if at.timestamp_subsec_nanos() % 1000 != 0 {
        return Err(format!(
            "cannot parse {} as timestamp: it has digits below the microsecond and would be truncated",
            Quoted(text)
        ));
    }
    Ok(at.timestamp_micros())
}

/// The common spellings `YYYY-MM-DDTHH:MM:SS[.f{1,9}]` then `Z` or an offset `±HH:MM`
/// (with a space for the `T` or not) read straight to microseconds since the epoch, without
/// the general parser; `None` for anything else, including a value with digits below the
/// microsecond, which [`timestamp`] then reads (or refuses) the general way. Where this
/// reads a value, `string_to_datetime` reads the same.
fn utc_micros(t: &[u8]) -> Option<i64> {
    let number = |range: std::ops::Range<usize>| digits(t.get(range)?);
    let (zone, offset) = match t.last()? {
        b'Z' => (1, 0),
        _ => {
            // An offset of less than a day, as arrow-cast reads it (`+05:30`, `-00:00`).
            let at = t.len().checked_sub(6)?;
            let sign = match t[at] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (hours, minutes) = (number(at + 1..at + 3)?, number(at + 4..at + 6)?);
            if t[at + 3] != b':' || hours > 23 || minutes > 59 {
                return None;
            }
            (6, sign * i64::from(hours * 3600 + minutes * 60))
        }
    };
    if t.len() < 19 + zone || !matches!(t[10], b'T' | b' ') || t[13] != b':' || t[16] != b':' {
        return None;
    }
    let days = ymd_days(t)?;
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let fraction = &t[19..t.len() - zone];
    let micros = match fraction.split_first() {
        None => 0,
        Some((b'.', f)) if (1..=6).contains(&f.len()) => {
            number(20..20 + f.len())? * 10u32.pow(6 - f.len() as u32)
        }
        Some((b'.', f)) if (7..=9).contains(&f.len()) && f[6..].iter().all(|&d| d == b'0') => {
            number(20..26)?
        }
        _ => return None,
    };
    let seconds = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset;
    Some(seconds * 1_000_000 + i64::from(micros))
}

/// `YYYY-MM-DD` at the start of `t` as days since 1970-01-01, when it is a date of the
/// proleptic Gregorian calendar (what chrono's `NaiveDate` holds); `None` otherwise.
#[inline]
fn ymd_days(t: &[u8]) -> Option<i64> {
    if t.get(4) != Some(&b'-') || t.get(7) != Some(&b'-') {
        return None;
    }
    let (year, month, day) = (digits(&t[0..4])?, digits(&t[5..7])?, digits(t.get(8..10)?)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > month_days {
        return None;
    }
    // Days since 1970-01-01 of the proleptic Gregorian date (years from March on).
    let (y, m) = if month <= 2 {
        (i64::from(year) - 1, month + 9)
    } else {
        (i64::from(year), month - 3)
    };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = i64::from((153 * m + 2) / 5 + day - 1);
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    Some(era * 146_097 + day_of_era - 719_468)
}

/// ASCII digits as a number (`None` if any byte is not one).
fn digits(t: &[u8]) -> Option<u32> {
    t.iter().try_fold(0u32, |v, &d| {
        d.is_ascii_digit().then(|| v * 10 + u32::from(d - b'0'))
    })
}

/// True when `text`, read as an infinite float, says so itself (`inf`, `-Infinity`…)
/// rather than being a finite number too large for the type.
pub(super) fn spells_infinity(text: &str) -> bool {
    let t = text.trim_ascii();
    let t = t.strip_prefix(['+', '-']).unwrap_or(t);
    t.eq_ignore_ascii_case("inf") || t.eq_ignore_ascii_case("infinity")
}

/// The message for a finite number too large for a float column.
pub(super) fn float_overflow(shown: &str, ty: ColumnType) -> String {
    format!("cannot parse {shown} as {ty}: out of range")
}

/// Most bytes of a value shown in an error; a longer one is cut, with `…` after its
/// closing quote.
const SHOWN_BYTES: usize = 80;

/// A text value as an error shows it: a JSON string (so it reads back as one), cut after
/// [`SHOWN_BYTES`], with control and invisible characters (a byte-order mark, zero-width
/// spaces, direction marks) escaped as `\uXXXX` so that they can be seen.
pub(super) struct Quoted<'a>(pub(super) &'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        let mut cut = self.0.len().min(SHOWN_BYTES);
        while !self.0.is_char_boundary(cut) {
            cut -= 1;
        }
        f.write_char('"')?;
        for c in self.0[..cut].chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if c.is_control() || invisible(c) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        write!(f, "\\u{unit:04x}")?;
                    }
                }
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')?;
        if cut < self.0.len() {
            f.write_str("…")?;
        }
        Ok(())
    }
}

/// A character that shows as nothing: format characters such as the byte-order mark,
/// zero-width spaces and joiners, and direction marks and embeddings.
fn invisible(c: char) -> bool {
    matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

/// How the text (or JSON number) of a `timestamp` or `date` column is read: the column's
/// [`TimeFormat`] and [`Zone`] (see [`crate::schema::ColumnSpec`]). The default — ISO 8601 /
/// RFC 3339 strings, naive times in UTC — reads as [`timestamp`] and [`date`] do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct TimeReading {
    format: Option<TimeFormat>,
    zone: Zone,
}

impl TimeReading {
    /// The reading of the column `name` of `spec` (the default without options).
    pub(super) fn of(spec: &super::ConvertSpec, name: &str) -> Self {
        spec.options(name).map_or_else(Self::default, |c| {
            Self::from_options(c.format.clone(), c.timezone)
        })
    }

    /// The reading of a column with these options.
    pub(super) fn from_options(format: Option<TimeFormat>, zone: Option<Zone>) -> Self {
        Self {
            format,
            zone: zone.unwrap_or_default(),
        }
    }

    /// ISO 8601 text, naive times in UTC: what [`timestamp`] and [`date`] read, and the fast
    /// paths read in their place.
    pub(super) fn is_default(&self) -> bool {
        self.format.is_none() && self.zone.is_utc()
    }

    /// A timestamp column's text as microseconds since the epoch, or why it cannot be.
    pub(super) fn timestamp(&self, text: &str) -> Result<i64, String> {
        match &self.format {
            None if self.zone.is_utc() => timestamp(text),
            None => self.zoned(text),
            Some(format) => match format.epoch_micros() {
                Some(_) => self.epoch(text, &Quoted(text).to_string(), format),
                None => self.pattern(text, format),
            },
        }
    }

    /// A timestamp column's JSON number (`literal`), read only under an epoch format.
    pub(super) fn timestamp_number(&self, literal: &str) -> Result<i64, String> {
        match &self.format {
            Some(format) if format.epoch_micros().is_some() => self.epoch(literal, literal, format),
            _ => Err(format!(
                "cannot parse {literal} as timestamp: write times as RFC 3339 strings such as \
                 \"2024-01-31T12:00:00Z\", or give the column a format such as epoch_seconds"
            )),
        }
    }

    /// A date column's text as days since the epoch, or why it cannot be.
    pub(super) fn date(&self, text: &str) -> Result<i32, String> {
        match &self.format {
            None => date(text),
            Some(format) if format.epoch_micros().is_some() => {
                let micros = self.epoch(text, &Quoted(text).to_string(), format)?;
                self.midnight(micros, &Quoted(text).to_string())
            }
            Some(TimeFormat::Pattern(pattern)) => {
                let bad = || {
                    format!(
                        "cannot parse {} as date with the format {pattern:?}",
                        Quoted(text)
                    )
                };
                // A pattern with a time of day reads as a date-time (a date alone would
                // silently drop the time): only midnight is a date.
                if let Ok(at) = chrono::NaiveDateTime::parse_from_str(text, pattern) {
                    if at.time() != chrono::NaiveTime::MIN {
                        return Err(format!(
                            "cannot parse {} as date: it has a time of day (declare the column as timestamp)",
                            Quoted(text)
                        ));
                    }
                    return days(at.date()).ok_or_else(bad);
                }
                let day = chrono::NaiveDate::parse_from_str(text, pattern).map_err(|_| bad())?;
                days(day).ok_or_else(bad)
            }
            Some(_) => unreachable!("epoch formats are matched above"),
        }
    }

    /// A date column's JSON number, read only under an epoch format.
    pub(super) fn date_number(&self, literal: &str) -> Result<i32, String> {
        match &self.format {
            Some(format) if format.epoch_micros().is_some() => {
                let micros = self.epoch(literal, literal, format)?;
                self.midnight(micros, literal)
            }
            _ => Err(format!(
                "cannot parse {literal} as date: write dates as strings such as \"2024-01-31\", \
                 or give the column a format such as epoch_seconds"
            )),
        }
    }

    /// A number of the epoch `format`'s unit (`shown` in errors) as microseconds, exactly.
    fn epoch(&self, number: &str, shown: &str, format: &TimeFormat) -> Result<i64, String> {
        let unit = format.epoch_micros().expect("an epoch format");
        // Microseconds are the unscaled value of a decimal with the unit's fraction digits.
        let scale = match unit {
            1_000_000 => 6,
            1_000 => 3,
            _ => 0,
        };
        let micros = decimal(number, 38, scale).map_err(|e| match e {
            DecimalError::Rounded => format!(
                "cannot parse {shown} as timestamp ({format}): it has digits below the \
                 microsecond and would be truncated"
            ),
            _ => format!("cannot parse {shown} as timestamp ({format}): not a number"),
        })?;
        i64::try_from(micros)
            .ok()
            .filter(|m| chrono::DateTime::from_timestamp_micros(*m).is_some())
            .ok_or_else(|| format!("cannot parse {shown} as timestamp ({format}): out of range"))
    }

    /// Days of the instant `micros` when it is a midnight in the zone.
    fn midnight(&self, micros: i64, shown: &str) -> Result<i32, String> {
        let at = chrono::DateTime::from_timestamp_micros(micros)
            .ok_or_else(|| format!("cannot parse {shown} as date: out of range"))?;
        let day = self.zone.date(at);
        let start = day.and_time(chrono::NaiveTime::MIN);
        if self.zone.instant(start).ok() != Some(at) {
            return Err(format!(
                "cannot parse {shown} as date: it is not a midnight in {} (it has a time of day; \
                 declare the column as timestamp)",
                self.zone
            ));
        }
        days(day).ok_or_else(|| format!("cannot parse {shown} as date: out of range"))
    }

    /// ISO 8601 text whose naive times are in the (non-UTC) zone.
    fn zoned(&self, text: &str) -> Result<i64, String> {
        use arrow_cast::parse::string_to_datetime;
        let parsed = match self.zone {
            Zone::Fixed(offset) => string_to_datetime(&offset, text).map(|t| t.to_utc()),
            Zone::Named(tz) => string_to_datetime(&tz, text).map(|t| t.to_utc()),
        };
        let at = match parsed {
            Ok(at) => at,
            Err(_) => {
                // A naive time the zone skips or repeats says so; anything else does not parse.
                let naive = string_to_datetime(&Utc, text)
                    .map_err(|_| format!("cannot parse {} as timestamp", Quoted(text)))?
                    .naive_utc();
                self.zone
                    .instant(naive)
                    .map_err(|e| format!("cannot parse {} as timestamp: {e}", Quoted(text)))?
            }
        };
        exact_micros(at, text)
    }

    /// Text read with a strftime pattern: an instant when it has an offset, else a local
    /// time in the zone (a date alone is its midnight).
    fn pattern(&self, text: &str, format: &TimeFormat) -> Result<i64, String> {
        let TimeFormat::Pattern(pattern) = format else {
            unreachable!("a pattern")
        };
        let bad = |e: chrono::ParseError| {
            format!(
                "cannot parse {} as timestamp with the format {pattern:?}: {e}",
                Quoted(text)
            )
        };
        let at = match chrono::DateTime::parse_from_str(text, pattern) {
            Ok(at) => at.to_utc(),
            Err(first) => {
                let local = match chrono::NaiveDateTime::parse_from_str(text, pattern) {
                    Ok(local) => local,
                    Err(_) => chrono::NaiveDate::parse_from_str(text, pattern)
                        .map(|d| d.and_time(chrono::NaiveTime::MIN))
                        .map_err(|_| bad(first))?,
                };
                self.zone
                    .instant(local)
                    .map_err(|e| format!("cannot parse {} as timestamp: {e}", Quoted(text)))?
            }
        };
        exact_micros(at, text)
    }
}

/// Days since 1970-01-01 of `day`, when it fits a `Date32`.
fn days(day: chrono::NaiveDate) -> Option<i32> {
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from((day - epoch).num_days()).ok()
}

/// `at` in microseconds, refused when it has digits below the microsecond.
fn exact_micros(at: chrono::DateTime<Utc>, text: &str) -> Result<i64, String> {
    if !at.timestamp_subsec_nanos().is_multiple_of(1000) {
        return Err(format!(
            "cannot parse {} as timestamp: it has digits below the microsecond and would be truncated",
            Quoted(text)
        ));
    }
    Ok(at.timestamp_micros())
}

#[cfg(test)]
mod tests {
    use arrow_array::types::Decimal128Type;

    use super::super::testutil::xorshift;
    use super::*;

    const D12_2: ColumnType = ColumnType::Decimal {
        precision: 12,
        scale: 2,
    };

    #[test]
    fn decimals_are_exact_or_refused() {
        for (text, value) in [
            ("1", 100),
            ("1.5", 150),
            ("1.500", 150),
            ("-1.05", -105),
            ("+0.01", 1),
            (" 7.10 ", 710),
            ("1.5e2", 15000),
            ("15E-1", 150),
            ("1000e-3", 100),
            ("0.000", 0),
            ("-0", 0),
            ("0e999999999999", 0),
            (".5", 50),
            ("5.", 500),
            ("9999999999.99", 999_999_999_999),
            ("0000000000009999999999.99", 999_999_999_999),
        ] {
            assert_eq!(decimal(text, 12, 2), Ok(value), "{text:?}");
        }
        for text in ["1.005", "-1.004", "0.001", "1e-3", "1.23456e2", "1e-999999"] {
            assert_eq!(decimal(text, 12, 2), Err(DecimalError::Rounded), "{text:?}");
        }
        for text in ["12345678901", "1e10", "99999999999.5", "1e999999999999"] {
            let e = decimal(text, 12, 2);
            assert!(
                matches!(e, Err(DecimalError::Overflow | DecimalError::Rounded)),
                "{text:?}: {e:?}"
            );
        }
        assert_eq!(decimal("1e10", 12, 2), Err(DecimalError::Overflow));
        for text in [
            "", ".", "-", "+.", "abc", "1..2", "1e", "1e+", "1.2.3", "--1", "1 2", "0x10", "1e2.5",
            "١",
        ] {
            assert_eq!(decimal(text, 12, 2), Err(DecimalError::Invalid), "{text:?}");
        }
        assert_eq!(
            decimal("99999999999999999999999999999999999999", 38, 0),
            Ok(99_999_999_999_999_999_999_999_999_999_999_999_999)
        );
        assert_eq!(
            decimal("-9.9999999999999999999999999999999999999e37", 38, 0),
            Ok(-99_999_999_999_999_999_999_999_999_999_999_999_999)
        );
        assert_eq!(decimal("1e38", 38, 0), Err(DecimalError::Overflow));
    }

    #[test]
    fn decimal_messages_say_why() {
        assert_eq!(
            decimal_message("\"1.005\"", D12_2, DecimalError::Rounded),
            "cannot parse \"1.005\" as decimal(12,2): it has more than 2 digits after the point and would be rounded"
        );
        assert_eq!(
            decimal_message("\"12345678901\"", D12_2, DecimalError::Overflow),
            "cannot parse \"12345678901\" as decimal(12,2): it has more than 10 digits before the point"
        );
        assert_eq!(
            decimal_message("\"x\"", D12_2, DecimalError::Invalid),
            "cannot parse \"x\" as decimal(12,2)"
        );
    }

    /// Wherever this parser and arrow-cast's both read a value they agree, and wherever
    /// only arrow-cast reads one, arrow-cast rounded it.
    #[test]
    fn decimals_agree_with_arrow_cast_except_where_it_rounds() {
        const ALPHABET: &[u8] = b"0123456789.-+eE 0019";
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15_u64);
        let mut both = 0;
        for _ in 0..200_000 {
            let len = 1 + (next() % 12) as usize;
            let text: String = (0..len)
                .map(|_| ALPHABET[next() as usize % ALPHABET.len()] as char)
                .collect();
            let (precision, scale) = (1 + (next() % 20) as u8, (next() % 6) as u8);
            let scale = scale.min(precision);
            let ours = decimal(&text, precision, scale);
            let theirs =
                arrow_cast::parse::parse_decimal::<Decimal128Type>(&text, precision, scale as i8);
            match (ours, theirs) {
                (Ok(a), Ok(b)) => {
                    both += 1;
                    assert_eq!(a, b, "{text:?} ({precision},{scale})")
                }
                (Err(DecimalError::Rounded), Ok(_)) => {}
                (Err(e), Ok(b)) => {
                    panic!("{text:?} ({precision},{scale}): we say {e:?}, arrow {b}")
                }
                (Ok(a), Err(e)) => panic!("{text:?} ({precision},{scale}): we say {a}, arrow {e}"),
                (Err(_), Err(_)) => {}
            }
        }
        assert!(both > 1000, "the comparison compared little: {both}");
    }

    #[test]
    fn whole_numbers_only() {
        let i32_range = (i128::from(i32::MIN), i128::from(i32::MAX));
        let whole = |s| whole_number(s, ColumnType::Int32, i32_range.0, i32_range.1);
        assert_eq!(whole("7"), Ok(7));
        assert_eq!(whole("-7"), Ok(-7));
        assert_eq!(whole("1.0"), Ok(1));
        assert_eq!(whole("1e3"), Ok(1000));
        assert_eq!(whole("2147483647"), Ok(2147483647));
        assert_eq!(
            whole("1.5").unwrap_err(),
            "cannot parse 1.5 as int32: it is not a whole number"
        );
        assert_eq!(
            whole("2147483648").unwrap_err(),
            "cannot parse 2147483648 as int32: out of range"
        );
        assert_eq!(
            whole("1e40").unwrap_err(),
            "cannot parse 1e40 as int32: out of range"
        );
        let big = whole_number(
            "9007199254740993.0",
            ColumnType::Int64,
            i64::MIN.into(),
            i64::MAX.into(),
        );
        assert_eq!(big, Ok(9_007_199_254_740_993), "exact, not through f64");
    }

    #[test]
    fn short_integers_read_as_str_parse_reads_them() {
        for text in [
            "0",
            "-0",
            "7",
            "-7",
            "007",
            "999999999999999999",
            "-999999999999999999",
            "1000000000000000000",
            "9223372036854775807",
            "-9223372036854775808",
            "",
            "-",
            "+1",
            "1.0",
            "1e3",
            " 1",
            "1 ",
            "--1",
            "١",
        ] {
            let ours = short_integer(text);
            if ours.is_some() {
                assert_eq!(ours, text.parse::<i64>().ok(), "{text:?}");
            } else {
                assert!(text.len() > 18 || text.parse::<i64>().is_err() || text.starts_with('+'));
            }
        }
    }

    #[test]
    fn dates_without_a_time_of_day() {
        assert_eq!(date("1970-01-02"), Ok(1));
        assert_eq!(date("19700102"), Ok(1));
        assert_eq!(
            date("2024-01-02T23:30:00-05:00").unwrap_err(),
            "cannot parse \"2024-01-02T23:30:00-05:00\" as date: it has a time of day (declare the column as timestamp)"
        );
        assert_eq!(
            date("2024-02-30").unwrap_err(),
            "cannot parse \"2024-02-30\" as date"
        );
    }

    #[test]
    fn timestamps_to_the_microsecond() {
        assert_eq!(timestamp("1970-01-01T00:00:01.000001Z"), Ok(1_000_001));
        assert_eq!(timestamp("1970-01-01T00:00:01.000001000Z"), Ok(1_000_001));
        assert_eq!(timestamp("1970-01-01 01:00:00+01:00"), Ok(0));
        assert_eq!(
            timestamp("2024-01-02T03:04:05.1234567Z").unwrap_err(),
            "cannot parse \"2024-01-02T03:04:05.1234567Z\" as timestamp: it has digits below the microsecond and would be truncated"
        );
        assert_eq!(
            timestamp("soon").unwrap_err(),
            "cannot parse \"soon\" as timestamp"
        );
    }

    /// `rounds` texts, each one of `bases` in turn with up to `edits - 1` bytes replaced,
    /// removed or inserted (from `alphabet`), at random places.
    fn mutations<'a>(
        bases: &'a [&str],
        alphabet: &'a [u8],
        seed: u64,
        rounds: usize,
        edits: u64,
    ) -> impl Iterator<Item = String> + 'a {
        let mut next = xorshift(seed);
        (0..rounds).map(move |round| {
            let mut text = bases[round % bases.len()].as_bytes().to_vec();
            for _ in 0..next() % edits {
                let at = next() as usize % text.len();
                match next() % 3 {
                    0 => text[at] = alphabet[next() as usize % alphabet.len()],
                    1 => drop(text.remove(at)),
                    _ => text.insert(at, alphabet[next() as usize % alphabet.len()]),
                }
            }
            String::from_utf8(text).unwrap()
        })
    }

    /// Wherever the fast path reads a timestamp, the general parser reads the same.
    #[test]
    fn the_timestamp_fast_path_agrees_with_arrow_cast() {
        const ALPHABET: &[u8] = b"0123456789012345-: TZz.+";
        let bases = [
            "2024-01-01T00:00:00.943Z",
            "1999-12-31 23:59:59Z",
            "2024-02-29T12:34:56.123456789Z",
            "0000-01-01T00:00:00.000000000Z",
            "9999-12-31T23:59:59.999999Z",
            "1900-02-28T01:02:03.5Z",
            "2000-02-29T10:20:30.250000Z",
            "2023-04-30T00:00:00Z",
            "1969-12-31T23:59:59.999999Z",
            "2024-01-01T08:15:30.123+02:00",
            "1999-12-31 23:59:59-05:30",
            "2024-02-29T00:00:00.123456-23:59",
            "1970-01-01T00:00:00+00:00",
            "0000-03-01T23:00:00.5+23:00",
        ];
        let mut fast = 0;
        for text in mutations(&bases, ALPHABET, 0x6a09_e667_f3bc_c908, 200_000, 4) {
            if let Some(micros) = utc_micros(text.as_bytes()) {
                fast += 1;
                let at = string_to_datetime(&Utc, &text);
                assert_eq!(
                    at.as_ref().map(|at| at.timestamp_micros()).ok(),
                    Some(micros),
                    "{text:?}"
                );
                assert_eq!(at.unwrap().timestamp_subsec_nanos() % 1000, 0, "{text:?}");
            }
        }
        assert!(fast > 30_000, "the fast path read only {fast}");
        assert_eq!(
            timestamp("2024-01-01T00:00:00.943Z"),
            Ok(1_704_067_200_943_000)
        );
    }

    /// Wherever the fast path reads a date, arrow-cast's parser reads the same.
    #[test]
    fn the_date_fast_path_agrees_with_arrow_cast() {
        const ALPHABET: &[u8] = b"0123456789012345-+ T";
        let bases = [
            "2024-02-29",
            "2023-02-28",
            "1900-02-28",
            "2000-02-29",
            "0000-01-01",
            "9999-12-31",
            "1969-12-31",
            "1970-01-01",
            "2024-04-30",
        ];
        let mut fast = 0;
        for text in mutations(&bases, ALPHABET, 0xbb67_ae85_84ca_a73b, 100_000, 3) {
            if text.len() == 10
                && let Some(days) = ymd_days(text.as_bytes())
            {
                fast += 1;
                assert_eq!(
                    Date32Type::parse(&text).map(i64::from),
                    Some(days),
                    "{text:?}"
                );
                assert_eq!(date(&text).map(i64::from), Ok(days), "{text:?}");
            }
        }
        assert!(fast > 20_000, "the fast path read only {fast}");
    }

    /// Wherever the fast path reads a decimal, the general reading gives the same.
    #[test]
    fn the_decimal_fast_path_agrees_with_the_general_reading() {
        const ALPHABET: &[u8] = b"0123456789000999.-+e ";
        let mut next = xorshift(0x3c6e_f372_fe94_f82b_u64);
        let mut fast = 0;
        for _ in 0..200_000 {
            let len = next() as usize % 24;
            let text: Vec<u8> = (0..len)
                .map(|_| ALPHABET[next() as usize % ALPHABET.len()])
                .collect();
            let text = String::from_utf8(text).unwrap();
            let precision = 1 + (next() % 38) as u8;
            let scale = (next() % (u64::from(precision) + 1)) as u8;
            if let Some(value) = short_decimal(text.as_bytes(), precision, scale) {
                fast += 1;
                assert_eq!(
                    any_decimal(&text, precision, scale),
                    Ok(value),
                    "{text:?} as decimal({precision},{scale})"
                );
            }
        }
        assert!(fast > 10_000, "the fast path read only {fast}");
    }

    #[test]
    fn infinity_spelled_out_or_not() {
        for t in ["inf", "-inf", "+Infinity", "INF", " inf "] {
            assert!(spells_infinity(t), "{t}");
        }
        for t in ["1e999", "-1e400", "infinite", "in"] {
            assert!(!spells_infinity(t), "{t}");
        }
    }

    fn reading(format: Option<&str>, zone: Option<&str>) -> TimeReading {
        TimeReading {
            format: format.map(|f| f.parse().unwrap()),
            zone: zone.map(|z| z.parse().unwrap()).unwrap_or_default(),
        }
    }

    fn shown(micros: i64) -> String {
        chrono::DateTime::from_timestamp_micros(micros)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
    }

    #[test]
    fn timestamps_in_formats_and_zones() {
        let utc = reading(None, None);
        assert!(utc.is_default());
        assert_eq!(
            utc.timestamp("2024-01-02T03:04:05"),
            timestamp("2024-01-02T03:04:05")
        );
        for (format, zone, text, want) in [
            (
                None,
                Some("America/New_York"),
                "2024-01-02T03:04:05",
                "2024-01-02T08:04:05Z",
            ),
            (
                None,
                Some("America/New_York"),
                "2024-01-02T03:04:05Z",
                "2024-01-02T03:04:05Z",
            ),
            (
                None,
                Some("+05:30"),
                "2024-01-02 03:04:05.25",
                "2024-01-01T21:34:05.250Z",
            ),
            (
                Some("epoch_seconds"),
                None,
                "1704164645",
                "2024-01-02T03:04:05Z",
            ),
            (
                Some("epoch_seconds"),
                None,
                "1704164645.123456",
                "2024-01-02T03:04:05.123456Z",
            ),
            (
                Some("epoch_seconds"),
                None,
                "1.704164645e9",
                "2024-01-02T03:04:05Z",
            ),
            (
                Some("epoch_millis"),
                None,
                "1704164645123",
                "2024-01-02T03:04:05.123Z",
            ),
            (
                Some("epoch_millis"),
                None,
                "-1000.5",
                "1969-12-31T23:59:58.999500Z",
            ),
            (
                Some("epoch_micros"),
                None,
                "1704164645123456",
                "2024-01-02T03:04:05.123456Z",
            ),
            (
                Some("%d/%m/%Y %H:%M"),
                None,
                "02/01/2024 03:04",
                "2024-01-02T03:04:00Z",
            ),
            (
                Some("%d/%m/%Y %H:%M"),
                Some("Europe/Paris"),
                "02/07/2024 03:04",
                "2024-07-02T01:04:00Z",
            ),
            (
                Some("%Y-%m-%d %H:%M:%S %z"),
                Some("Europe/Paris"),
                "2024-01-02 03:04:05 -0500",
                "2024-01-02T08:04:05Z",
            ),
            (Some("%d.%m.%Y"), None, "02.01.2024", "2024-01-02T00:00:00Z"),
            (Some("%s"), None, "1704164645", "2024-01-02T03:04:05Z"),
        ] {
            let r = reading(format, zone);
            let got = r.timestamp(text).map(shown);
            assert_eq!(got.as_deref(), Ok(want), "{format:?} {zone:?} {text}");
        }
        let millis = reading(Some("epoch_millis"), None);
        assert_eq!(
            millis
                .timestamp_number("1704164645123")
                .map(shown)
                .as_deref(),
            Ok("2024-01-02T03:04:05.123Z")
        );
        for (r, text, says) in [
            (
                reading(Some("epoch_seconds"), None),
                "1.0000001",
                "below the microsecond",
            ),
            (
                reading(Some("epoch_millis"), None),
                "1.0001",
                "below the microsecond",
            ),
            (
                reading(Some("epoch_micros"), None),
                "1.5",
                "below the microsecond",
            ),
            (reading(Some("epoch_seconds"), None), "abc", "not a number"),
            (reading(Some("epoch_seconds"), None), "1e30", "out of range"),
            (
                reading(Some("%d/%m/%Y"), None),
                "2024-01-02",
                "with the format \"%d/%m/%Y\"",
            ),
            (
                reading(None, Some("America/New_York")),
                "2024-03-10T02:30:00",
                "does not exist",
            ),
            (
                reading(None, Some("America/New_York")),
                "2024-11-03T01:30:00",
                "twice",
            ),
            (
                reading(None, Some("America/New_York")),
                "yesterday",
                "cannot parse \"yesterday\"",
            ),
            (
                reading(Some("%d/%m/%Y %H:%M"), Some("America/New_York")),
                "03/11/2024 01:30",
                "twice",
            ),
        ] {
            let err = r.timestamp(text).unwrap_err();
            assert!(err.contains(says), "{r:?} {text}: {err}");
        }
        let err = utc.timestamp_number("1700000000").unwrap_err();
        assert!(err.contains("give the column a format"), "{err}");
    }

    #[test]
    fn dates_in_formats_and_zones() {
        let day = |d: i32| {
            chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap() + chrono::Days::new(d as u64)
        };
        for (format, zone, text, want) in [
            (None, None, "2024-01-02", "2024-01-02"),
            (Some("%d/%m/%Y"), None, "02/01/2024", "2024-01-02"),
            (
                Some("%d/%m/%Y %H:%M"),
                None,
                "02/01/2024 00:00",
                "2024-01-02",
            ),
            (Some("epoch_millis"), None, "1704153600000", "2024-01-02"),
            (
                Some("epoch_seconds"),
                Some("America/New_York"),
                "1704171600",
                "2024-01-02",
            ),
        ] {
            let r = reading(format, zone);
            assert_eq!(
                r.date(text).map(|d| day(d).to_string()).as_deref(),
                Ok(want),
                "{text}"
            );
        }
        let r = reading(Some("epoch_millis"), None);
        assert_eq!(
            r.date_number("1704153600000")
                .map(|d| day(d).to_string())
                .as_deref(),
            Ok("2024-01-02")
        );
        for (r, text, says) in [
            (
                reading(Some("epoch_millis"), None),
                "1704153600001",
                "not a midnight in UTC",
            ),
            (
                reading(Some("%d/%m/%Y %H:%M"), None),
                "02/01/2024 10:00",
                "time of day",
            ),
            (
                reading(Some("%d/%m/%Y"), None),
                "2024-01-02",
                "with the format",
            ),
        ] {
            let err = r.date(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
        assert!(
            reading(None, None)
                .date_number("19000")
                .unwrap_err()
                .contains("give the column a format")
        );
    }

    #[test]
    fn values_in_errors_are_json_strings_cut_short() {
        assert_eq!(Quoted("plain").to_string(), r#""plain""#);
        assert_eq!(
            Quoted("a\"b\\c\nd\u{1}\u{feff}é😀").to_string(),
            r#""a\"b\\c\nd\u0001\ufeffé😀""#
        );
        let long = "é".repeat(100);
        let shown = Quoted(&long).to_string();
        assert!(shown.ends_with("\"…") && shown.len() < 90, "{shown}");
        let back: String = serde_json::from_str(shown.trim_end_matches('…')).unwrap();
        assert_eq!(back, "é".repeat(40));
    }
}
