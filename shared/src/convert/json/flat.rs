//! The fast path of [`super::JsonBatches`]: flat JSON objects read in one pass, straight
//! into the typed columns of a batch.
//!
//! arrow-json first writes every line to a tape and then walks the tape once per column;
//! most lines of a file are flat objects whose keys come in the schema's order, which can
//! be read byte by byte into the builders instead. The decoder here accepts a line only
//! when it is certain that arrow-json's path (its tape and the strict decoders of
//! `super`) would read the same values from it; on any doubt it [`Declined`], and the
//! whole batch goes through that path, which then reports errors and sets rows aside
//! exactly as before. So this module never produces an error message of its own.
//!
//! What it accepts, arrow-json's tape accepts too: strict JSON where the tape is lenient
//! (a missing or extra comma is declined), tokens cut where the tape cuts them (a number
//! is the longest run of `0-9+-.eE`, as arrow-json hands it to the column decoders), and
//! escapes decoded as the tape decodes them — except surrogate pairs, read as the
//! characters they stand for, which is what arrow-json reads once the converter has
//! spelled them out (a line where that matters is reported by [`FlatDecoder::push`]).
//! Values are converted by the same functions as the strict decoders ([`value`],
//! arrow-cast's parsers). Declined: a value of a JSON type other than the column decoder
//! reads, a column's key given twice, a value that fails to convert, a float too large for
//! its type, nesting deeper than [`MAX_DEPTH`], anything after the object.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, PrimitiveBuilder, StringBuilder};
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    TimestampMicrosecondType,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_cast::parse::Parser;
use arrow_schema::{DataType, SchemaRef};
use memchr::memchr2;

use super::super::{Ignored, UnknownFields, value};
use crate::schema::{ColumnType, FieldPath, FieldType, Step};

/// The line is not for the fast path: its batch goes through arrow-json's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Declined;

type Read<T = ()> = Result<T, Declined>;

/// Deepest nesting of arrays and objects skipped in the values of unknown keys: the
/// skipping recurses, and no flat row needs more.
const MAX_DEPTH: usize = 64;

/// Rows of flat objects decoded into the columns of a batch.
pub(super) struct FlatDecoder {
    /// The schema of the batches: the decode schema of [`super::JsonBatches`].
    schema: SchemaRef,
    columns: Vec<Column>,
    /// Column names by index: keys usually come in the schema's order, so the column after
    /// the last one found is compared first, before `index`.
    names: Vec<String>,
    /// Each name as a key written without escapes, compared in place with the key at the
    /// cursor (`None` for a name with a `"` or `\`, which a key spells with escapes).
    keys: Vec<Option<Key>>,
    /// Column index by name.
    index: HashMap<String, usize>,
    /// The generation (row) in which each column was last given a value.
    seen: Vec<u64>,
    generation: u64,
    /// Rows read since the last [`Self::finish`].
    rows: usize,
    /// Of `rows`, those already moved out of the builders into `chunks`.
    chunked: usize,
    /// Per column, the arrays of rows read before a line was rolled back.
    chunks: Vec<Vec<ArrayRef>>,
    /// Part of a row may have been appended (after [`Declined`]): roll it back or clear
    /// before reuse.
    dirty: bool,
    /// Strings with escapes, decoded.
    scratch: Vec<u8>,
    /// What an unknown key does: under [`UnknownFields::Ignore`] its value is counted, under
    /// the others the line is declined (arrow-json's path refuses or rescues it).
    unknown: UnknownFields,
    /// The unknown keys of the line being read whose values are not null.
    line_unknown: Vec<String>,
    /// The last unknown key read.
    unknown_key: String,
    /// Values of unknown keys in the rows read since the last [`Self::finish`] or
    /// [`Self::clear`].
    ignored: Ignored,
}

impl FlatDecoder {
    /// A decoder of rows of `schema`, or `None` when a column has a type this decoder
    /// does not read, or two columns share a name (arrow-json then fills the first).
    pub(super) fn new(schema: &SchemaRef, unknown: UnknownFields) -> Option<Self> {
        let fields = schema.fields();
        let columns = fields
            .iter()
            .map(|f| Column::new(FieldType::from_field(f)?.scalar()?, f.data_type()))
            .collect::<Option<Vec<_>>>()?;
        let names: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
        let index: HashMap<String, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        if names.is_empty() || index.len() != names.len() {
            return None;
        }
        Some(Self {
            schema: schema.clone(),
            columns,
            keys: names.iter().map(|n| Key::new(n)).collect(),
            seen: vec![0; names.len()],
            names,
            index,
            generation: 0,
            rows: 0,
            chunked: 0,
            chunks: vec![Vec::new(); fields.len()],
            dirty: false,
            scratch: Vec::new(),
            unknown,
            line_unknown: Vec::new(),
            unknown_key: String::new(),
            ignored: Ignored::default(),
        })
    }

    /// The values of unknown keys counted in the rows of the batch taken last.
    pub(super) fn take_ignored(&mut self) -> Ignored {
        std::mem::take(&mut self.ignored)
    }

    /// Reads `line` (one line of text, its newline included or not) as one more row, or
    /// declines it; after declining, the decoder holds part of a row until
    /// [`Self::rollback`] or [`Self::clear`]. Returns whether the line has an escaped
    /// surrogate pair that arrow-json would read as another character (see
    /// [`super::arrow_json_misreads_pair`]), so that the caller can spell it out before arrow-json
    /// ever reads the line again.
    pub(super) fn push(&mut self, line: &str) -> Read<bool> {
        self.dirty = true;
        self.generation += 1;
        self.line_unknown.clear();
        let mut cur = Cursor::new(line);
        cur.skip_ws();
        cur.expect(b'{')?;
        cur.skip_ws();
        if !cur.eat(b'}') {
            let mut next = 0;
            loop {
                cur.expect(b'"')?;
                let column = self.key(&mut cur, next)?;
                cur.skip_ws();
                cur.expect(b':')?;
                cur.skip_ws();
                match column {
                    Some(c) => {
                        if self.seen[c] == self.generation {
                            return Err(Declined);
                        }
                        self.seen[c] = self.generation;
                        next = c + 1;
                        self.value(&mut cur, c)?;
                    }
                    None => {
                        if self.unknown != UnknownFields::Ignore {
                            return Err(Declined);
                        }
                        if cur.peek() != Some(b'n') {
                            // `key` left the key in `scratch` (or in the line, unescaped).
                            self.line_unknown
                                .push(std::mem::take(&mut self.unknown_key));
                        }
                        skip_value(&mut cur, &mut self.scratch, 0)?
                    }
                }
                cur.skip_ws();
                match cur.next() {
                    Some(b',') => cur.skip_ws(),
                    Some(b'}') => break,
                    _ => return Err(Declined),
                }
            }
        }
        cur.skip_ws();
        if !cur.is_end() {
            return Err(Declined);
        }
        let generation = self.generation;
        for (column, _) in self
            .columns
            .iter_mut()
            .zip(&self.seen)
            .filter(|(_, seen)| **seen != generation)
        {
            column.null();
        }
        self.rows += 1;
        self.dirty = false;
        for key in self.line_unknown.drain(..) {
            // Spelled as a path, as the general path counts it.
            let path = FieldPath::new(vec![Step::Key(key)]).map(|p| p.to_string());
            self.ignored.add(path.as_deref().unwrap_or(""), 1);
        }
        Ok(cur.misread_pair)
    }

    /// The rows read since the last call as a batch, and the decoder ready for the next;
    /// `None` when there are none (or, which cannot happen, the columns do not make one).
    pub(super) fn finish(&mut self) -> Option<RecordBatch> {
        let rows = std::mem::take(&mut self.rows);
        self.chunked = 0;
        self.dirty = false;
        let mut columns = Vec::with_capacity(self.columns.len());
        for (column, chunks) in self.columns.iter_mut().zip(&mut self.chunks) {
            let last = column.finish();
            if chunks.is_empty() {
                columns.push(last);
                continue;
            }
            chunks.push(last);
            let parts: Vec<&dyn Array> = chunks.iter().map(AsRef::as_ref).collect();
            let joined = arrow_select::concat::concat(&parts);
            chunks.clear();
            columns.push(joined.ok()?);
        }
        if rows == 0 {
            return None;
        }
        RecordBatch::try_new(self.schema.clone(), columns)
            .ok()
            .filter(|b| b.num_rows() == rows)
    }

    /// Drops the part of a row that a declined line left, keeping the rows read before
    /// it: the builders' arrays are cut to those rows and set aside until [`Self::finish`].
    pub(super) fn rollback(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        // Each column holds one value per complete row, and at most one more.
        let complete = self.rows - self.chunked;
        for (column, chunks) in self.columns.iter_mut().zip(&mut self.chunks) {
            chunks.push(column.finish().slice(0, complete));
        }
        self.chunked = self.rows;
    }

    /// Forgets the rows read and any part of a row.
    pub(super) fn clear(&mut self) {
        if self.dirty || self.rows > 0 {
            self.finish();
        }
        self.ignored = Ignored::default();
    }

    /// The column of the key at `cur` (after its opening quote), `None` for a key not in
    /// the schema; `next` is the column expected.
    fn key(&mut self, cur: &mut Cursor<'_>, next: usize) -> Read<Option<usize>> {
        if let Some(Some(key)) = self.keys.get(next)
            && key.starts(cur.rest())
        {
            cur.at += key.len();
            return Ok(Some(next));
        }
        let key = cur.string(&mut self.scratch)?;
        let column = match self.names.get(next) {
            Some(name) if name == key => Some(next),
            _ => self.index.get(key).copied(),
        };
        if column.is_none() {
            self.unknown_key.clear();
            self.unknown_key.push_str(key);
        }
        Ok(column)
    }

    /// Reads the value at `cur` into column `c`.
    fn value(&mut self, cur: &mut Cursor<'_>, c: usize) -> Read {
        let column = &mut self.columns[c];
        match cur.peek() {
            Some(b'"') => {
                cur.at += 1;
                column.string(cur.string(&mut self.scratch)?)
            }
            Some(b'-' | b'0'..=b'9') => {
                let token = cur.number();
                if column.is_whole()
                    && let Some(v) = value::short_integer(token)
                {
                    return column.whole(v);
                }
                if let Column::Float64(b) = column
                    && let Some(v) = short_float(token)
                {
                    b.append_value(v);
                    return Ok(());
                }
                column.number(token)
            }
            Some(b'n') => {
                cur.literal("null")?;
                column.null();
                Ok(())
            }
            Some(b't') => {
                cur.literal("true")?;
                column.boolean(true)
            }
            Some(b'f') => {
                cur.literal("false")?;
                column.boolean(false)
            }
            _ => Err(Declined),
        }
    }
}

/// Skips the value at `cur`, which must be valid where arrow-json's tape would check it:
/// the value of a key not in the schema, which arrow-json reads and ignores.
fn skip_value(cur: &mut Cursor<'_>, scratch: &mut Vec<u8>, depth: usize) -> Read {
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
struct Key {
    quoted: Vec<u8>,
    words: [u64; 2],
    masks: [u64; 2],
}

impl Key {
    /// `None` for a name with a `"` or `\`, which a key spells with escapes.
    fn new(name: &str) -> Option<Self> {
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
    fn len(&self) -> usize {
        self.quoted.len()
    }

    /// Whether `rest` (what follows a key's opening quote) starts with this key and its
    /// closing quote.
    fn starts(&self, rest: &[u8]) -> bool {
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
struct Cursor<'a> {
    text: &'a str,
    at: usize,
    /// Whether a string read so far had a surrogate pair that arrow-json misreads (see
    /// [`super::arrow_json_misreads_pair`]).
    misread_pair: bool,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            misread_pair: false,
        }
    }

    fn rest(&self) -> &'a [u8] {
        self.text.as_bytes().get(self.at..).unwrap_or_default()
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn is_end(&self) -> bool {
        self.at >= self.text.len()
    }

    /// Skips JSON whitespace, as arrow-json's tape knows it.
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// Consumes `b` if it comes next.
    fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        self.at += usize::from(found);
        found
    }

    fn expect(&mut self, b: u8) -> Read {
        if self.eat(b) { Ok(()) } else { Err(Declined) }
    }

    fn literal(&mut self, word: &str) -> Read {
        if !self.rest().starts_with(word.as_bytes()) {
            return Err(Declined);
        }
        self.at += word.len();
        Ok(())
    }

    /// The number token at the cursor, cut as arrow-json's tape cuts it: the longest run
    /// of `0-9+-.eE` (whether it is a number is for the column to say).
    fn number(&mut self) -> &'a str {
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
    fn string<'s>(&mut self, scratch: &'s mut Vec<u8>) -> Read<&'s str>
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
                            super::arrow_json_misreads_pair((u32::from(c) - 0x1_0000) >> 10);
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

/// The first `"` or `\` in `bytes`. Most strings are short and their runs between
/// escapes shorter, so the first 32 bytes are searched eight at a time in a word, inline,
/// and only the rest by `memchr2`, whose call and set-up cost more than such a string.
fn quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        if at == 32 {
            return memchr2(b'"', b'\\', &bytes[at..]).map(|i| at + i);
        }
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
fn short_float(token: &str) -> Option<f64> {
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
fn is_json_number(literal: &str) -> bool {
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

/// The builder of one column, and how it reads each kind of JSON value: as the strict
/// decoder of `super` for its type reads it, declining wherever that decoder fails.
enum Column {
    Int32(PrimitiveBuilder<Int32Type>),
    Int64(PrimitiveBuilder<Int64Type>),
    Float32(PrimitiveBuilder<Float32Type>),
    Float64(PrimitiveBuilder<Float64Type>),
    Decimal(PrimitiveBuilder<Decimal128Type>, ColumnType),
    String(StringBuilder),
    Bool(BooleanBuilder),
    Date(PrimitiveBuilder<Date32Type>),
    Timestamp(PrimitiveBuilder<TimestampMicrosecondType>),
}

impl Column {
    /// The column of `ty`, whose Arrow type is `data_type`.
    fn new(ty: ColumnType, data_type: &DataType) -> Option<Self> {
        let dt = data_type.clone();
        Some(match ty {
            ColumnType::Int32 => Self::Int32(PrimitiveBuilder::new()),
            ColumnType::Int64 => Self::Int64(PrimitiveBuilder::new()),
            ColumnType::Float32 => Self::Float32(PrimitiveBuilder::new()),
            ColumnType::Float64 => Self::Float64(PrimitiveBuilder::new()),
            ColumnType::Decimal { .. } => {
                Self::Decimal(PrimitiveBuilder::new().with_data_type(dt), ty)
            }
            ColumnType::String => Self::String(StringBuilder::new()),
            ColumnType::Bool => Self::Bool(BooleanBuilder::new()),
            ColumnType::Date => Self::Date(PrimitiveBuilder::new()),
            ColumnType::Timestamp => Self::Timestamp(PrimitiveBuilder::new().with_data_type(dt)),
        })
    }

    fn null(&mut self) {
        match self {
            Self::Int32(b) => b.append_null(),
            Self::Int64(b) => b.append_null(),
            Self::Float32(b) => b.append_null(),
            Self::Float64(b) => b.append_null(),
            Self::Decimal(b, _) => b.append_null(),
            Self::String(b) => b.append_null(),
            Self::Bool(b) => b.append_null(),
            Self::Date(b) => b.append_null(),
            Self::Timestamp(b) => b.append_null(),
        }
    }

    /// A JSON string (decoded).
    fn string(&mut self, s: &str) -> Read {
        match self {
            Self::String(b) => b.append_value(s),
            Self::Int32(b) => b.append_value(Int32Type::parse(s).ok_or(Declined)?),
            Self::Int64(b) => b.append_value(Int64Type::parse(s).ok_or(Declined)?),
            Self::Float32(b) => {
                let v = Float32Type::parse(s).ok_or(Declined)?;
                b.append_value(finite_or_spelled(v, v.is_infinite(), s)?);
            }
            Self::Float64(b) => {
                let v = Float64Type::parse(s).ok_or(Declined)?;
                b.append_value(finite_or_spelled(v, v.is_infinite(), s)?);
            }
            Self::Decimal(b, ty) => b.append_value(decimal(s, *ty)?),
            Self::Date(b) => b.append_value(value::date(s).map_err(|_| Declined)?),
            Self::Timestamp(b) => b.append_value(value::timestamp(s).map_err(|_| Declined)?),
            Self::Bool(_) => return Err(Declined),
        }
        Ok(())
    }

    /// Whether this is an integer column, which [`Self::whole`] appends to.
    fn is_whole(&self) -> bool {
        matches!(self, Self::Int32(_) | Self::Int64(_))
    }

    /// A number token read as a whole number (by [`value::short_integer`]): appended if
    /// in range, as [`Self::number`] would append the token.
    fn whole(&mut self, v: i64) -> Read {
        match self {
            Self::Int32(b) => b.append_value(i32::try_from(v).map_err(|_| Declined)?),
            Self::Int64(b) => b.append_value(v),
            _ => return Err(Declined),
        }
        Ok(())
    }

    /// A JSON number token, as arrow-json's tape cuts it.
    fn number(&mut self, literal: &str) -> Read {
        match self {
            Self::Int32(b) => {
                b.append_value(whole(literal, ColumnType::Int32, i32::MIN, i32::MAX)?)
            }
            Self::Int64(b) => {
                b.append_value(whole(literal, ColumnType::Int64, i64::MIN, i64::MAX)?)
            }
            Self::Float32(b) => b.append_value(float::<f32>(literal, f32::is_finite)?),
            Self::Float64(b) => b.append_value(float::<f64>(literal, f64::is_finite)?),
            Self::Decimal(b, ty) => b.append_value(decimal(literal, *ty)?),
            Self::String(_) | Self::Bool(_) | Self::Date(_) | Self::Timestamp(_) => {
                return Err(Declined);
            }
        }
        Ok(())
    }

    fn boolean(&mut self, v: bool) -> Read {
        match self {
            Self::Bool(b) => b.append_value(v),
            _ => return Err(Declined),
        }
        Ok(())
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Int32(b) => Arc::new(b.finish()),
            Self::Int64(b) => Arc::new(b.finish()),
            Self::Float32(b) => Arc::new(b.finish()),
            Self::Float64(b) => Arc::new(b.finish()),
            Self::Decimal(b, _) => Arc::new(b.finish()),
            Self::String(b) => Arc::new(b.finish()),
            Self::Bool(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::Timestamp(b) => Arc::new(b.finish()),
        }
    }
}

/// A float read from a string: an infinity only when the string spells it (a finite
/// number too large for the type is an error of `super::Finite`).
fn finite_or_spelled<T>(v: T, infinite: bool, s: &str) -> Read<T> {
    if infinite && !value::spells_infinity(s) {
        return Err(Declined);
    }
    Ok(v)
}

/// A float read from a number token: finite, and only from a strict JSON number.
fn float<T: std::str::FromStr + Copy>(literal: &str, is_finite: fn(T) -> bool) -> Read<T> {
    if !is_json_number(literal) {
        return Err(Declined);
    }
    let v = literal.parse::<T>().map_err(|_| Declined)?;
    if is_finite(v) { Ok(v) } else { Err(Declined) }
}

/// A decimal of `ty` read from a string or a number token, as `super::Exact` reads it.
fn decimal(text: &str, ty: ColumnType) -> Read<i128> {
    let ColumnType::Decimal { precision, scale } = ty else {
        return Err(Declined);
    };
    value::decimal(text, precision, scale.unsigned_abs()).map_err(|_| Declined)
}

/// A JSON number as a whole number of `ty` within `min..=max`, read by
/// [`value::whole_number`] as the strict decoder reads it.
fn whole<T: TryFrom<i128> + Into<i128>>(literal: &str, ty: ColumnType, min: T, max: T) -> Read<T> {
    let v = value::whole_number(literal, ty, min.into(), max.into());
    v.ok().and_then(|v| T::try_from(v).ok()).ok_or(Declined)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_schema::{Field, Schema};

    use super::*;

    fn decoder() -> FlatDecoder {
        let schema = Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("n", DataType::Int32, true),
        ]);
        FlatDecoder::new(&Arc::new(schema), UnknownFields::Ignore).unwrap()
    }

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
    fn a_string_cut_by_a_bad_escape_leaves_nothing_in_the_next_value() {
        let mut flat = decoder();
        flat.push(r#"{"name":"x\ty","n":1}"#).unwrap();
        // Decoded up to `\x`, which arrow-json's tape does not read: declined mid-string.
        assert_eq!(flat.push(r#"{"name":"a\"b\x","n":2}"#), Err(Declined));
        flat.rollback();
        flat.push(r#"{"name":"c","n":3}"#).unwrap();
        let batch = flat.finish().unwrap();
        let names = batch.column(0).as_string::<i32>();
        assert_eq!(names.iter().collect::<Vec<_>>(), [Some("x\ty"), Some("c")]);
    }

    #[test]
    fn integers_read_in_place_are_the_tokens_whole_number_reads() {
        let mut flat = decoder();
        for n in [
            "0",
            "-0",
            "2147483647",
            "-2147483648",
            "007",
            "1e3",
            "1.0",
            "-12",
        ] {
            flat.push(&format!(r#"{{"n":{n}}}"#)).unwrap();
        }
        for n in ["2147483648", "1.5", "-", "1e+-", "99999999999999999999"] {
            assert_eq!(flat.push(&format!(r#"{{"n":{n}}}"#)), Err(Declined), "{n}");
            flat.rollback();
        }
        let batch = flat.finish().unwrap();
        let n = batch.column(1).as_primitive::<Int32Type>();
        let values: Vec<_> = n.iter().flatten().collect();
        assert_eq!(values, [0, 0, 2147483647, -2147483648, 7, 1000, 1, -12]);
    }

    #[test]
    fn floats_read_in_place_are_the_values_str_parse_reads() {
        let schema = Schema::new(vec![Field::new("x", DataType::Float64, true)]);
        let mut flat = FlatDecoder::new(&Arc::new(schema), UnknownFields::Ignore).unwrap();
        let mut tokens: Vec<String> = [
            "0",
            "-0",
            "0.1",
            "-0.0",
            "369.47",
            "2038.98",
            "0.30000000000000004",
            "123456789012345",
            "1234567890123456",
            "99999999999999.9",
            "9007199254740993",
            "1e3",
            "1.5E-2",
            "-44.657986",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        let mut state = 7u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let digits = format!("{}", state >> 11);
            let len = 1 + (state % 17) as usize;
            let digits = &digits[..len.min(digits.len())];
            let point = (state >> 7) as usize % (digits.len() + 1);
            let sign = if state & 1 == 0 { "-" } else { "" };
            tokens.push(match point {
                p if p == 0 || p == digits.len() => format!("{sign}{digits}"),
                p => format!("{sign}{}.{}", &digits[..p], &digits[p..]),
            });
        }
        tokens.retain(|t| is_json_number(t));
        assert!(tokens.len() > 15_000, "{}", tokens.len());
        for t in &tokens {
            flat.push(&format!(r#"{{"x":{t}}}"#)).unwrap();
        }
        let batch = flat.finish().unwrap();
        let read = batch.column(0).as_primitive::<Float64Type>();
        assert_eq!(read.len(), tokens.len());
        for (t, v) in tokens.iter().zip(read.iter()) {
            let parsed: f64 = t.parse().unwrap();
            assert_eq!(v.map(f64::to_bits), Some(parsed.to_bits()), "{t}");
        }
        // Not JSON numbers: declined, as before.
        for t in ["01.5", "1.", "-", "1.2.3"] {
            assert_eq!(flat.push(&format!(r#"{{"x":{t}}}"#)), Err(Declined), "{t}");
            flat.rollback();
        }
    }

    #[test]
    fn keys_are_compared_in_place_whatever_their_length() {
        for name in [
            "a",
            "order_id",
            "fifteen_bytes__",
            "sixteen_bytes___",
            "a_long_name_of_twenty",
        ] {
            let schema = Schema::new(vec![
                Field::new(name, DataType::Int32, true),
                Field::new("z", DataType::Int32, true),
            ]);
            let mut flat = FlatDecoder::new(&Arc::new(schema), UnknownFields::Ignore).unwrap();
            flat.push(&format!(r#"{{"{name}":1,"z":2}}"#)).unwrap();
            // A key that only starts with the name is another key (unknown, skipped).
            flat.push(&format!(r#"{{"{name}x":1,"z":3}}"#)).unwrap();
            // A short line: fewer than 16 bytes after the key's quote.
            flat.push(&format!(r#"{{"{name}":4}}"#)).unwrap();
            let batch = flat.finish().unwrap();
            let first = batch.column(0).as_primitive::<Int32Type>();
            assert_eq!(
                first.iter().collect::<Vec<_>>(),
                [Some(1), None, Some(4)],
                "{name}"
            );
        }
    }
}
