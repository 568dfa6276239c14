//! The cursor of the fast path: a position in one line of JSON, and what reads the text at
//! it as arrow-json's tape would (keys, strings and their escapes, number tokens, literals),
//! declining whatever the tape would read otherwise or not at all.
//!
//! It also reads a whole value as JSON text for a `json` column ([`Cursor::json_value`]):
//! most values are already written as `tree::write_json` writes them (compact, strings
//! escaped only where JSON requires it) and are copied as they stand; the others are written
//! again in that form ([`Cursor::write_json`]).

use super::super::tree::write_string;
use super::super::value;

/// The line is not for the fast path: its batch goes through arrow-json's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Declined;

pub(crate) type Read<T = ()> = Result<T, Declined>;

/// Deepest nesting of arrays and objects skipped (the values of unknown keys) or read as
/// JSON text (a `json` value): no row the fast path is for needs more, and arrow-json's path
/// reads deeper ones (as JSON text up to `tree::MAX_JSON_DEPTH`).
pub(super) const MAX_DEPTH: usize = 64;

/// Skips the value at `cur`, which must be valid where arrow-json's tape would check it:
/// the value of a key not in the schema, which arrow-json reads and ignores.
pub(super) fn skip_value(cur: &mut Cursor<'_>, scratch: &mut Vec<u8>, depth: usize) -> Read {
    match cur.peek() {
        Some(b'"') => {
            cur.at += 1;
            cur.string(scratch).map(drop)
        }
        Some(b'-' | b'0'..=b'9') => {
            cur.number();
            Ok(())
        }
        Some(b'n') => cur.literal("null"),
        Some(b't') => cur.literal("true"),
        Some(b'f') => cur.literal("false"),
        Some(open @ (b'{' | b'[')) if depth < MAX_DEPTH => {
            cur.at += 1;
            let close = if open == b'{' { b'}' } else { b']' };
            cur.skip_ws();
            if cur.eat(close) {
                return Ok(());
            }
            loop {
                if open == b'{' {
                    cur.expect(b'"')?;
                    cur.string(scratch)?;
                    cur.skip_ws();
                    cur.expect(b':')?;
                    cur.skip_ws();
                }
                skip_value(cur, scratch, depth + 1)?;
                cur.skip_ws();
                match cur.next() {
                    Some(b',') => cur.skip_ws(),
                    Some(b) if b == close => return Ok(()),
                    _ => return Err(Declined),
                }
            }
        }
        _ => Err(Declined),
    }
}

/// A column's name as a key spells it without escapes, closing quote included, and the
/// same in two little-endian words with masks when it fits in 16 bytes: most keys are then
/// compared with two loads and two masked comparisons instead of a call to `memcmp`.
pub(super) struct Key {
    quoted: Vec<u8>,
    words: [u64; 2],
    masks: [u64; 2],
}

impl Key {
    /// `None` for a name with a `"` or `\`, which a key spells with escapes.
    pub(super) fn new(name: &str) -> Option<Self> {
        if name.contains(['"', '\\']) {
            return None;
        }
        let mut quoted = name.as_bytes().to_vec();
        quoted.push(b'"');
        let (mut words, mut masks) = ([0; 2], [0; 2]);
        if quoted.len() <= 16 {
            let (mut padded, mut mask) = ([0u8; 16], [0u8; 16]);
            padded[..quoted.len()].copy_from_slice(&quoted);
            mask[..quoted.len()].fill(0xff);
            words = [word(&padded), word(&padded[8..])];
            masks = [word(&mask), word(&mask[8..])];
        }
        Some(Self {
            quoted,
            words,
            masks,
        })
    }

    /// The key's length, closing quote included.
    pub(super) fn len(&self) -> usize {
        self.quoted.len()
    }

    /// Whether `rest` (what follows a key's opening quote) starts with this key and its
    /// closing quote.
    pub(super) fn starts(&self, rest: &[u8]) -> bool {
        match rest.get(..16) {
            Some(head) if self.quoted.len() <= 16 => {
                let low = (word(head) ^ self.words[0]) & self.masks[0];
                let high = (word(&head[8..]) ^ self.words[1]) & self.masks[1];
                (low | high) == 0
            }
            _ => rest.starts_with(&self.quoted),
        }
    }
}

/// The first eight bytes of `bytes` as a little-endian word (zero if there are fewer).
fn word(bytes: &[u8]) -> u64 {
    bytes
        .first_chunk::<8>()
        .map_or(0, |w| u64::from_le_bytes(*w))
}

/// A position in a line.
#[derive(Clone)]
pub(super) struct Cursor<'a> {
    text: &'a str,
    pub(super) at: usize,
    /// Whether a string read so far had a surrogate pair that arrow-json misreads (see
    /// [`super::arrow_json_misreads_pair`]).
    pub(super) misread_pair: bool,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            misread_pair: false,
        }
    }

    pub(super) fn rest(&self) -> &'a [u8] {
        self.text.as_bytes().get(self.at..).unwrap_or_default()
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    pub(super) fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    /// The text from `start` to the cursor.
    pub(super) fn since(&self, start: usize) -> &'a str {
        self.text.get(start..self.at).unwrap_or_default()
    }

    pub(super) fn is_end(&self) -> bool {
        self.at >= self.text.len()
    }

    /// Skips JSON whitespace, as arrow-json's tape knows it.
    pub(super) fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// Consumes `b` if it comes next.
    pub(super) fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        self.at += usize::from(found);
        found
    }

    pub(super) fn expect(&mut self, b: u8) -> Read {
        if self.eat(b) { Ok(()) } else { Err(Declined) }
    }

    pub(super) fn literal(&mut self, word: &str) -> Read {
        if !self.rest().starts_with(word.as_bytes()) {
            return Err(Declined);
        }
        self.at += word.len();
        Ok(())
    }

    /// The number token at the cursor, cut as arrow-json's tape cuts it: the longest run
    /// of `0-9+-.eE` (whether it is a number is for the column to say).
    pub(super) fn number(&mut self) -> &'a str {
        let start = self.at;
        let len = self
            .rest()
            .iter()
            .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .count();
        self.at += len;
        // The token is ASCII, so its ends are character boundaries.
        self.text.get(start..self.at).unwrap_or_default()
    }

    /// The string at the cursor (after its opening quote), up to its closing quote, which
    /// is consumed: in place when it has no escapes, else decoded into `scratch`.
    ///
    /// Inline, as most strings have no escapes; the decoding is a call of its own.
    #[inline(always)]
    pub(super) fn string<'s>(&mut self, scratch: &'s mut Vec<u8>) -> Read<&'s str>
    where
        'a: 's,
    {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let end = start + quote_or_backslash(self.rest()).ok_or(Declined)?;
        if bytes[end] == b'"' {
            self.at = end + 1;
            // Quotes are ASCII: the string's ends are character boundaries.
            return self.text.get(start..end).ok_or(Declined);
        }
        self.escaped_string(start, end, scratch)
    }

    /// The string from `start`, whose first escape is at `end`, decoded into `scratch`.
    #[inline(never)]
    fn escaped_string<'s>(
        &mut self,
        start: usize,
        end: usize,
        scratch: &'s mut Vec<u8>,
    ) -> Read<&'s str> {
        scratch.clear();
        scratch.extend_from_slice(self.text.as_bytes().get(start..end).ok_or(Declined)?);
        self.at = end;
        self.unescape(scratch)?;
        // Runs of the line cut at ASCII bytes and characters encoded whole: UTF-8, which
        // safe code has to check again to read as text (a fraction of decoding it).
        simdutf8::basic::from_utf8(scratch).map_err(|_| Declined)
    }

    /// Decodes the rest of a string from the cursor, escapes and all, appending it to
    /// `out`, up to and consuming its closing quote. Runs between escapes are copied a word
    /// at a time: eight bytes appended whole, then cut back to the quote or backslash
    /// among them; escapes are encoded as UTF-8 in place.
    fn unescape(&mut self, out: &mut Vec<u8>) -> Read {
        let bytes = self.text.as_bytes();
        let mut at = self.at;
        loop {
            let end = loop {
                match bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
                    Some(chunk) => {
                        let found = quotes_or_backslashes(u64::from_le_bytes(*chunk));
                        out.extend_from_slice(chunk);
                        if found != 0 {
                            let skipped = 8 - (found.trailing_zeros() / 8) as usize;
                            out.truncate(out.len() - skipped);
                            break at + 8 - skipped;
                        }
                        at += 8;
                    }
                    None => {
                        let tail = bytes.get(at..).unwrap_or_default();
                        let i = tail
                            .iter()
                            .position(|&b| b == b'"' || b == b'\\')
                            .ok_or(Declined)?;
                        out.extend_from_slice(&tail[..i]);
                        break at + i;
                    }
                }
            };
            if bytes[end] == b'"' {
                self.at = end + 1;
                return Ok(());
            }
            at = end + 1 + self.escape(bytes.get(end + 1..).unwrap_or_default(), out)?;
        }
    }

    /// Appends the character of the escape `escaped` starts with (after its backslash) to
    /// `out`, as arrow-json's tape decodes it, and returns the escape's length.
    fn escape(&mut self, escaped: &[u8], out: &mut Vec<u8>) -> Read<usize> {
        let byte = match escaped.first().ok_or(Declined)? {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let code = hex4(escaped.get(1..5))?;
                // Encoded here as `char::encode_utf8` would, a byte at a time: `push` stays
                // inline where appending a slice of two or three may become a `memcpy` call.
                match code {
                    0..=0x7f => out.push(code as u8),
                    0x80..=0x7ff => {
                        out.push(0xc0 | (code >> 6) as u8);
                        out.push(0x80 | (code & 0x3f) as u8);
                    }
                    0xd800..=0xdfff => {
                        let c = surrogate_pair(code, escaped)?;
                        self.misread_pair |=
                            super::super::arrow_json_misreads_pair((u32::from(c) - 0x1_0000) >> 10);
                        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                        return Ok(PAIR_LEN);
                    }
                    _ => {
                        out.push(0xe0 | (code >> 12) as u8);
                        out.push(0x80 | (code >> 6 & 0x3f) as u8);
                        out.push(0x80 | (code & 0x3f) as u8);
                    }
                }
                return Ok(5);
            }
            _ => return Err(Declined),
        };
        out.push(byte);
        Ok(1)
    }
}

/// The bytes of `word` that are `"` or `\`, each marked by its high bit; the lowest marked
/// byte is exact (a borrow only sets bits above one), the others may not be.
fn quotes_or_backslashes(word: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    let zeros = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    zeros(word ^ (ONES * u64::from(b'"'))) | zeros(word ^ (ONES * u64::from(b'\\')))
}

/// The first `"` or `\` in `bytes`: sixteen bytes at a time in a vector while there are
/// sixteen, then eight in a word, then one by one. Most strings are short, and a call of
/// `memchr2` costs more than such a string (it searched runs past 32 bytes before).
pub(super) fn quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    use wide::u8x16;
    let (quote, backslash) = (u8x16::splat(b'"'), u8x16::splat(b'\\'));
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..).and_then(<[u8]>::first_chunk::<16>) {
        let v = u8x16::new(*chunk);
        let found = (v.simd_eq(quote) | v.simd_eq(backslash)).to_bitmask();
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize);
        }
        at += 16;
    }
    if let Some(chunk) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        let found = quotes_or_backslashes(u64::from_le_bytes(*chunk));
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = bytes.get(at..).unwrap_or_default();
    tail.iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|i| at + i)
}

/// A surrogate pair after its first backslash (`uD840\uDC00`) whose first half, `high`, has
/// been read: the character it stands for.
fn surrogate_pair(high: u32, escaped: &[u8]) -> Read<char> {
    if escaped.get(5..7) != Some(b"\\u") {
        return Err(Declined);
    }
    let low = hex4(escaped.get(7..11))?;
    if !(0xD800..=0xDBFF).contains(&high) || !(0xDC00..=0xDFFF).contains(&low) {
        return Err(Declined);
    }
    char::from_u32(0x1_0000 + ((high - 0xD800) << 10) + (low - 0xDC00)).ok_or(Declined)
}

/// The length of an escaped surrogate pair after its first backslash (`uD840\uDC00`).
const PAIR_LEN: usize = 11;

/// Each byte's value as a hex digit (`0-9a-fA-F`, as `char::to_digit(16)` reads them), and
/// for any other byte a bit above those four digits can reach, however shifted.
const HEX: [u64; 256] = {
    let mut table = [1 << 32; 256];
    let mut i = 0;
    while i < 16 {
        table[b"0123456789abcdef"[i] as usize] = i as u64;
        table[b"0123456789ABCDEF"[i] as usize] = i as u64;
        i += 1;
    }
    table
};

/// Four hex digits as a number.
fn hex4(digits: Option<&[u8]>) -> Read<u32> {
    let digits = digits.and_then(<[u8]>::first_chunk::<4>).ok_or(Declined)?;
    let [a, b, c, d] = digits.map(|digit| HEX[usize::from(digit)]);
    u32::try_from(a << 12 | b << 8 | c << 4 | d).map_err(|_| Declined)
}

/// A number token read as an `f64` when it is a JSON number without an exponent and with
/// at most 15 digits; `None` for any other token, which [`float`] then reads. Its digits as
/// a whole number and the power of ten it is divided by are both exact in an `f64`, so the
/// one division rounds correctly: the value `str::parse` reads (its own fast path for such
/// numbers).
#[inline]
pub(super) fn short_float(token: &str) -> Option<f64> {
    const POWERS: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    let number = value::PlainNumber::new(token.as_bytes())?;
    // JSON's grammar: no leading zero (`01`), digits on both sides of a point.
    let leading_zero = number.int.len() > 1 && number.int[0] == b'0';
    if number.int.is_empty() || leading_zero || number.frac == Some(&[]) || number.count() > 15 {
        return None;
    }
    let mantissa = number.mantissa();
    // Below 10^15 < 2^53: exact.
    let v = mantissa as f64 / POWERS[number.frac_digits().len()];
    Some(if number.negative { -v } else { v })
}

/// Whether `literal` is a JSON number (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`):
/// on these, `str::parse` and arrow-json's float parser agree, both rounding correctly.
pub(super) fn is_json_number(literal: &str) -> bool {
    let s = literal.as_bytes();
    let digits = |s: &[u8], at: usize| s[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    let mut at = usize::from(s.first() == Some(&b'-'));
    match digits(s, at) {
        0 => return false,
        n if n > 1 && s[at] == b'0' => return false,
        n => at += n,
    }
    if s.get(at) == Some(&b'.') {
        match digits(s, at + 1) {
            0 => return false,
            n => at += 1 + n,
        }
    }
    if matches!(s.get(at), Some(b'e' | b'E')) {
        at += 1;
        at += usize::from(matches!(s.get(at), Some(b'+' | b'-')));
        match digits(s, at) {
            0 => return false,
            n => at += n,
        }
    }
    at == s.len()
}

/// The bytes of `word` below 0x20 (control characters), each marked by its high bit; the
/// lowest marked byte is exact, as in [`quotes_or_backslashes`].
fn controls(word: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    word.wrapping_sub(ONES * 0x20) & !word & HIGHS
}

/// The first `"`, `\` or control character in `bytes`, searched as
/// [`quote_or_backslash`] searches.
fn string_stop(bytes: &[u8]) -> Option<usize> {
    use wide::u8x16;
    let (quote, backslash, space) = (u8x16::splat(b'"'), u8x16::splat(b'\\'), u8x16::splat(0x1f));
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..).and_then(<[u8]>::first_chunk::<16>) {
        let v = u8x16::new(*chunk);
        // Below 0x20: the lane is its own minimum with 0x1f.
        let control = v.min(space).simd_eq(v);
        let found = (v.simd_eq(quote) | v.simd_eq(backslash) | control).to_bitmask();
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize);
        }
        at += 16;
    }
    while let Some(chunk) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        let word = u64::from_le_bytes(*chunk);
        let found = quotes_or_backslashes(word) | controls(word);
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = bytes.get(at..).unwrap_or_default();
    tail.iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|i| at + i)
}

/// Whether the four hex digits of a `\u` escape are the ones `write_string` writes for
/// the control character `code`: lower-case, for the controls without a short escape.
fn written_as_is(code: u32, digits: &[u8]) -> bool {
    code < 0x20
        && !matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)
        && digits.iter().all(|d| !d.is_ascii_uppercase())
}

impl Cursor<'_> {
    /// Skips JSON whitespace; whether there was any.
    fn skip_any_ws(&mut self) -> bool {
        let before = self.at;
        self.skip_ws();
        self.at != before
    }

    /// The rest of a string from the cursor (after its opening quote), consumed with its
    /// closing quote: whether `write_string` would write it as it stands (no escape it would
    /// not make, no control character unescaped). Declines an escape the tape refuses.
    fn string_as_written(&mut self) -> Read<bool> {
        let bytes = self.text.as_bytes();
        let mut at = self.at;
        let mut written = true;
        loop {
            let stop = at + string_stop(bytes.get(at..).unwrap_or_default()).ok_or(Declined)?;
            match bytes[stop] {
                b'"' => {
                    self.at = stop + 1;
                    return Ok(written);
                }
                b'\\' => match bytes.get(stop + 1) {
                    Some(b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f') => at = stop + 2,
                    Some(b'/') => {
                        written = false;
                        at = stop + 2;
                    }
                    Some(b'u') => {
                        let digits = bytes.get(stop + 2..stop + 6).ok_or(Declined)?;
                        let code = hex4(Some(digits))?;
                        // A surrogate is checked where the string is written again.
                        written &= written_as_is(code, digits);
                        at = stop + 6;
                    }
                    _ => return Err(Declined),
                },
                _ => {
                    // A control character as it stands: the tape keeps it, `write_string`
                    // escapes it.
                    written = false;
                    at = stop + 1;
                }
            }
        }
    }

    /// A key of an object read as JSON text, up to and including its colon.
    fn key_as_written(&mut self, written: &mut bool) -> Read {
        *written &= !self.skip_any_ws();
        self.expect(b'"')?;
        *written &= self.string_as_written()?;
        *written &= !self.skip_any_ws();
        self.expect(b':')
    }

    /// Reads the JSON value at the cursor (strict JSON, nested at most [`MAX_DEPTH`] deep):
    /// whether its text is already in the form `tree::write_json` gives it (no whitespace, no
    /// escape `write_string` would not make), so that it can be copied as it stands.
    pub(super) fn json_value(&mut self) -> Read<bool> {
        let mut written = true;
        // One bit per open container, 1 for an object.
        let (mut open, mut depth) = (0u64, 0usize);
        loop {
            written &= !self.skip_any_ws();
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    written &= self.string_as_written()?;
                }
                Some(b'-' | b'0'..=b'9') => {
                    if !is_json_number(self.number()) {
                        return Err(Declined);
                    }
                }
                Some(b't') => self.literal("true")?,
                Some(b'f') => self.literal("false")?,
                Some(b'n') => self.literal("null")?,
                Some(b @ (b'{' | b'[')) if depth < MAX_DEPTH => {
                    self.at += 1;
                    let object = b == b'{';
                    written &= !self.skip_any_ws();
                    if !self.eat(if object { b'}' } else { b']' }) {
                        open = open << 1 | u64::from(object);
                        depth += 1;
                        if object {
                            self.key_as_written(&mut written)?;
                        }
                        continue;
                    }
                }
                _ => return Err(Declined),
            }
            // After a value: close what ends here, up to the next value.
            loop {
                if depth == 0 {
                    return Ok(written);
                }
                written &= !self.skip_any_ws();
                let object = open & 1 == 1;
                match self.next() {
                    Some(b',') => {
                        if object {
                            self.key_as_written(&mut written)?;
                        }
                        break;
                    }
                    Some(b'}') if object => {}
                    Some(b']') if !object => {}
                    _ => return Err(Declined),
                }
                open >>= 1;
                depth -= 1;
            }
        }
    }

    /// Writes the JSON value at the cursor to `out` as `tree::write_json` writes it (strings
    /// decoded and escaped by `write_string`, numbers as written), reading it as
    /// [`Self::json_value`] does.
    pub(super) fn write_json(&mut self, out: &mut String, scratch: &mut Vec<u8>) -> Read {
        let (mut open, mut depth) = (0u64, 0usize);
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    write_string(out, self.string(scratch)?);
                }
                Some(b'-' | b'0'..=b'9') => {
                    let number = self.number();
                    if !is_json_number(number) {
                        return Err(Declined);
                    }
                    out.push_str(number);
                }
                Some(b't') => {
                    self.literal("true")?;
                    out.push_str("true");
                }
                Some(b'f') => {
                    self.literal("false")?;
                    out.push_str("false");
                }
                Some(b'n') => {
                    self.literal("null")?;
                    out.push_str("null");
                }
                Some(b @ (b'{' | b'[')) if depth < MAX_DEPTH => {
                    self.at += 1;
                    let object = b == b'{';
                    out.push(char::from(b));
                    self.skip_ws();
                    let close = if object { b'}' } else { b']' };
                    if self.eat(close) {
                        out.push(char::from(close));
                    } else {
                        open = open << 1 | u64::from(object);
                        depth += 1;
                        if object {
                            self.write_key(out, scratch)?;
                        }
                        continue;
                    }
                }
                _ => return Err(Declined),
            }
            loop {
                if depth == 0 {
                    return Ok(());
                }
                self.skip_ws();
                let object = open & 1 == 1;
                match self.next() {
                    Some(b',') => {
                        out.push(',');
                        if object {
                            self.write_key(out, scratch)?;
                        }
                        break;
                    }
                    Some(b'}') if object => out.push('}'),
                    Some(b']') if !object => out.push(']'),
                    _ => return Err(Declined),
                }
                open >>= 1;
                depth -= 1;
            }
        }
    }

    /// A key of an object written as JSON text, and its colon.
    fn write_key(&mut self, out: &mut String, scratch: &mut Vec<u8>) -> Read {
        self.skip_ws();
        self.expect(b'"')?;
        write_string(out, self.string(scratch)?);
        self.skip_ws();
        self.expect(b':')?;
        out.push(':');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use memchr::memchr2;

    use super::*;

    #[test]
    fn quotes_and_backslashes_are_found_where_memchr2_finds_them() {
        let mut state = 0x51u64;
        let mut byte = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Mostly letters, sometimes a quote, a backslash, or a byte near them.
            match (state >> 33) % 40 {
                0 => b'"',
                1 => b'\\',
                2 => b'"' ^ 0x80,
                3 => b'\\' + 1,
                4 => 0xff,
                n => b'a' + n as u8,
            }
        };
        for len in 0..80 {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len).map(|_| byte()).collect();
                for start in 0..len.min(9) {
                    let rest = &bytes[start..];
                    assert_eq!(
                        quote_or_backslash(rest),
                        memchr2(b'"', b'\\', rest),
                        "{rest:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn escaped_strings_decode_to_the_text_they_spell() {
        let mut state = 0x7e5u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        // Characters at the edges of every UTF-8 length, and those JSON must escape.
        let pool = [
            'a',
            'Z',
            ' ',
            '/',
            '"',
            '\\',
            '\n',
            '\t',
            '\u{1}',
            '\u{7f}',
            '\u{80}',
            'é',
            '\u{7ff}',
            '\u{800}',
            '€',
            '中',
            '\u{d7ff}',
            '\u{e000}',
            '\u{ffff}',
            '\u{10000}',
            '😀',
            '\u{10ffff}',
        ];
        let mut scratch = Vec::new();
        for len in 0..60 {
            for _ in 0..50 {
                let text: String = (0..len).map(|_| pool[next(22) as usize]).collect();
                let mut line = String::from("\"");
                for c in text.chars() {
                    let must = matches!(c, '"' | '\\') || c < ' ';
                    let choice = next(4);
                    match c {
                        '"' | '\\' | '/' if choice == 0 => line.extend(['\\', c]),
                        '\n' if choice == 0 => line.push_str("\\n"),
                        '\t' if choice == 0 => line.push_str("\\t"),
                        _ if must || choice < 3 => {
                            let mut units = [0; 2];
                            for unit in c.encode_utf16(&mut units) {
                                if next(2) == 0 {
                                    line.push_str(&format!("\\u{unit:04x}"));
                                } else {
                                    line.push_str(&format!("\\u{unit:04X}"));
                                }
                            }
                        }
                        _ => line.push(c),
                    }
                }
                line.push('"');
                line.push_str(&",\"n\":1}"[..next(8) as usize]);
                let mut cur = Cursor::new(&line);
                cur.at = 1;
                assert_eq!(cur.string(&mut scratch), Ok(text.as_str()), "{line}");
                assert_eq!(&line[cur.at..], &",\"n\":1}"[..line.len() - cur.at]);
                let expected: String = serde_json::from_str(&line[..cur.at]).unwrap();
                assert_eq!(expected, text);
            }
        }
    }

    #[test]
    fn string_stops_are_the_first_quote_backslash_or_control() {
        let mut state = 0x2au64;
        for len in 0..70 {
            for _ in 0..300 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        match (state >> 33) % 50 {
                            0 => b'"',
                            1 => b'\\',
                            2 => 0x1f,
                            3 => 0x00,
                            4 => 0x20,
                            5 => 0xff,
                            6 => 0x9f,
                            n => b'a' + n as u8 % 26,
                        }
                    })
                    .collect();
                let naive = bytes
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || b < 0x20);
                assert_eq!(string_stop(&bytes), naive, "{bytes:?}");
                let naive = bytes.iter().position(|&b| b == b'"' || b == b'\\');
                assert_eq!(quote_or_backslash(&bytes), naive, "{bytes:?}");
            }
        }
    }

    /// `text` read as a `json` value: its text as written, or `None` when it is not in the
    /// written form; and as written again.
    fn json(text: &str) -> (Option<String>, String) {
        let mut cur = Cursor::new(text);
        let as_is = cur.json_value().unwrap();
        assert!(cur.is_end(), "{text}");
        let mut again = Cursor::new(text);
        let mut out = String::new();
        again.write_json(&mut out, &mut Vec::new()).unwrap();
        assert!(again.is_end(), "{text}");
        (as_is.then(|| text.to_string()), out)
    }

    #[test]
    fn json_values_are_copied_when_written_as_write_json_writes_them() {
        for written in [
            r#"{"a":1,"b":[true,false,null],"c":{"d":"e"},"a":-1.5e3}"#,
            r#"[]"#,
            r#"{}"#,
            r#""x""#,
            r#"12"#,
            r#"[[],[{}],"é\"\\\n\t\u0001"]"#,
        ] {
            assert_eq!(json(written), (Some(written.into()), written.into()));
        }
        for (text, written) in [
            (r#"{ "a" : 1 }"#, r#"{"a":1}"#),
            (r#"["a\/b"]"#, r#"["a/b"]"#),
            (r#"["\u00e9\u0041"]"#, r#"["éA"]"#),
            (r#"["\u000A\u001F"]"#, r#"["\n\u001f"]"#),
            (r#"["\uD83D\uDE00"]"#, r#"["😀"]"#),
            ("[\"a\u{1}b\"]", r#"["a\u0001b"]"#),
            ("[1,\n 2]", "[1,2]"),
        ] {
            assert_eq!(json(text), (None, written.into()), "{text}");
        }
        for bad in [
            "[1,]",
            "{\"a\":1,}",
            "[1 2]",
            "01",
            "1.",
            "[\"\\x\"]",
            "{\"a\"}",
            "[",
            "nul",
            "{1:2}",
            "[1,,2]",
        ] {
            assert_eq!(Cursor::new(bad).json_value(), Err(Declined), "{bad}");
            assert_eq!(
                Cursor::new(bad).write_json(&mut String::new(), &mut Vec::new()),
                Err(Declined),
                "{bad}"
            );
        }
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(Cursor::new(&deep).json_value(), Err(Declined));
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(Cursor::new(&ok).json_value(), Ok(true));
    }
}
