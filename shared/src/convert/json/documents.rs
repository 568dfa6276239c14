//! JSON documents (`"format": "json"`): a file of JSON values, cut into the records the JSON
//! decoder reads, one at a time, as a stream.
//!
//! The file holds one value, a top-level array of values, or values concatenated with or
//! without whitespace between them (Firehose's `{…}{…}`, pretty-printed objects). Without
//! [`JsonDocuments::records`] each value (each element of a top-level array) is a record.
//! With it, each value is an object holding the records in the array under that key
//! (`{"Records":[…]}`), and each element of the array is a record; the members named by
//! [`JsonDocuments::envelope`] are read into every record of the value, as if the record
//! held them (`logGroup` beside each of `logEvents`).
//!
//! Nothing is built here: the bytes are scanned for the structure only (strings, escapes and
//! brackets), and each record's text is handed to the decoder, which reads its values
//! exactly as it reads a JSON line. Memory is one record (at most `max_record_bytes`) and the
//! envelope, whatever the size of a value: a 1 GB array streams as a 1 GB JSON Lines file.
//!
//! A value that is not an object, or holds no records array, is a bad row of its own (its
//! text, up to `max_record_bytes`, is what the rejects keep): it is never skipped unseen.
//! What puts the structure in doubt (an unclosed string, a bracket that does not match, a
//! missing `:`) fails the object under either policy, as malformed CSV quoting does.

use std::io::BufRead;

use super::super::{ConvertError, JsonDocuments};

/// Where a record is: for its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::convert) struct Place {
    /// 1-based physical line where the record starts.
    pub(in crate::convert) line: u64,
    /// 1-based ordinal of the record in the file (`None` for JSON Lines, whose records are
    /// its lines).
    pub(in crate::convert) record: Option<u64>,
}

impl Place {
    /// The JSON line `line`.
    pub(in crate::convert) fn line(line: u64) -> Self {
        Self { line, record: None }
    }

    /// An error of the record here.
    pub(in crate::convert) fn error(
        self,
        column: Option<&str>,
        message: impl Into<String>,
    ) -> ConvertError {
        ConvertError::Parse {
            line: Some(self.line),
            record: self.record.and_then(std::num::NonZeroU64::new),
            column: column.map(str::to_owned),
            message: message.into(),
        }
    }
}

/// What [`Documents::next`] found.
pub(in crate::convert) enum Next {
    /// A record, its text appended to the buffer (ending with a newline).
    Record(Place),
    /// A bad row: its text appended to the buffer, and why.
    Bad(ConvertError),
    /// The end of the input.
    End,
}

/// The records of a file of JSON documents.
pub(super) struct Documents<R> {
    input: Input<R>,
    records: Option<Vec<u8>>,
    envelope: Vec<Vec<u8>>,
    max_record_bytes: usize,
    /// Records handed out so far.
    record: u64,
    /// Values begun so far.
    value: u64,
    /// Inside a top-level array: its elements are the values.
    in_top_array: bool,
    /// No element of the top-level array read yet.
    top_first: bool,
    /// Inside the records array of a value: its elements are the records.
    in_records: bool,
    /// No element of the records array read yet.
    records_first: bool,
    /// The envelope members of the value in progress, as `"key":value` texts joined by `,`.
    envelope_text: Vec<u8>,
    /// The envelope keys seen in the value in progress.
    envelope_seen: Vec<bool>,
    /// The value in progress's records array has been read.
    records_read: bool,
    /// Line and number of the value in progress.
    value_place: (u64, u64),
    /// The text of the value in progress up to its records array, for the rejects of a
    /// value without one (at most `max_record_bytes`).
    value_text: Vec<u8>,
    /// The records array of the value in progress came before all its envelope members
    /// did: its records are held until the value ends.
    hold: bool,
    /// Records held (their place, or why they are bad, and their text).
    held: std::collections::VecDeque<(Result<Place, ConvertError>, Vec<u8>)>,
    /// Bytes of `held`.
    held_bytes: usize,
}

impl<R: BufRead> Documents<R> {
    pub(super) fn new(reader: R, options: &JsonDocuments, max_record_bytes: usize) -> Self {
        Self {
            input: Input {
                reader,
                line: 1,
                peeked: None,
            },
            records: options.records.as_ref().map(|r| r.as_bytes().to_vec()),
            envelope: options
                .envelope
                .iter()
                .map(|e| e.as_bytes().to_vec())
                .collect(),
            max_record_bytes,
            record: 0,
            value: 0,
            in_top_array: false,
            top_first: false,
            in_records: false,
            records_first: false,
            envelope_text: Vec::new(),
            envelope_seen: vec![false; options.envelope.len()],
            records_read: false,
            value_place: (1, 0),
            value_text: Vec::new(),
            hold: false,
            held: std::collections::VecDeque::new(),
            held_bytes: 0,
        }
    }

    /// The next record, appended to `buf`.
    pub(super) fn next(&mut self, buf: &mut Vec<u8>) -> Result<Next, ConvertError> {
        loop {
            if let Some((place, text)) = self.held.pop_front() {
                self.held_bytes -= text.len();
                let start = buf.len();
                buf.extend_from_slice(&text);
                return Ok(self.emit(buf, start, place));
            }
            if self.in_records && self.hold {
                self.hold_records()?;
                continue;
            }
            if self.in_records {
                let first = std::mem::take(&mut self.records_first);
                match self.next_in_array(first)? {
                    Some(()) => {
                        let start = buf.len();
                        let place = self.record_at(buf)?;
                        return Ok(self.emit(buf, start, place));
                    }
                    None => {
                        self.in_records = false;
                        self.records_read = true;
                        if let Some(bad) = self.finish_value(buf)? {
                            return Ok(bad);
                        }
                        continue;
                    }
                }
            }
            let more = if self.in_top_array {
                let first = std::mem::take(&mut self.top_first);
                self.next_in_array(first)?.is_some()
            } else {
                self.input.skip_ws()?;
                self.input.peek()?.is_some()
            };
            if !more {
                if self.in_top_array {
                    self.in_top_array = false;
                    continue;
                }
                return Ok(Next::End);
            }
            // A file that is one array holds its values in it.
            if !self.in_top_array && self.input.peek()? == Some(b'[') {
                self.input.bump();
                self.in_top_array = true;
                self.top_first = true;
                continue;
            }
            if self.records.is_none() {
                let start = buf.len();
                let place = self.record_at(buf)?;
                return Ok(self.emit(buf, start, place));
            }
            self.value += 1;
            self.value_place = (self.input.line, self.value);
            if let Some(bad) = self.open_value(buf)? {
                return Ok(bad);
            }
        }
    }

    /// In an array (top-level or of records) whose first element is still to come if
    /// `first`: past the `,` before the next element, `Some` if there is one; `None` past
    /// the closing `]`.
    fn next_in_array(&mut self, first: bool) -> Result<Option<()>, ConvertError> {
        self.input.skip_ws()?;
        match self.input.peek()? {
            Some(b']') => {
                self.input.bump();
                Ok(None)
            }
            Some(b',') if !first => {
                self.input.bump();
                self.input.skip_ws()?;
                match self.input.peek()? {
                    Some(b']') | None => Err(self.structure("a value after ','")),
                    Some(_) => Ok(Some(())),
                }
            }
            Some(_) if first => Ok(Some(())),
            Some(_) => Err(self.structure("',' or ']' between the elements of an array")),
            None => Err(self.structure("the end of an array (']')")),
        }
    }

    /// Reads the next value, a record, to the end of `buf`: its place, or why it is bad
    /// (longer than `max_record_bytes`: what the limit allowed of it is in `buf`).
    fn record_at(
        &mut self,
        buf: &mut Vec<u8>,
    ) -> Result<Result<Place, ConvertError>, ConvertError> {
        self.record += 1;
        let place = Place {
            line: self.input.line,
            record: Some(self.record),
        };
        let over = self.input.value(Some(buf), self.max_record_bytes)?;
        if over {
            return Ok(Err(place.error(
                None,
                format!(
                    "the record is longer than the limit of {} bytes (max_record_bytes)",
                    self.max_record_bytes
                ),
            )));
        }
        Ok(Ok(place))
    }

    /// The record at `start` of `buf` handed out: with the envelope's members put in it
    /// when it is one of a records array, and a newline after it.
    fn emit(&self, buf: &mut Vec<u8>, start: usize, place: Result<Place, ConvertError>) -> Next {
        match place {
            Ok(place) => {
                if !self.envelope_text.is_empty() {
                    envelop(buf, start, &self.envelope_text);
                }
                buf.push(b'\n');
                Next::Record(place)
            }
            Err(error) => {
                buf.push(b'\n');
                Next::Bad(error)
            }
        }
    }

    /// Reads the records array in progress whole into `held`, and the rest of its value
    /// (the envelope members after it among them); at most `max_record_bytes` are held.
    fn hold_records(&mut self) -> Result<(), ConvertError> {
        loop {
            let first = std::mem::take(&mut self.records_first);
            if self.next_in_array(first)?.is_none() {
                break;
            }
            let mut text = Vec::new();
            let place = self.record_at(&mut text)?;
            self.held_bytes += text.len();
            self.held.push_back((place, text));
            if self.held_bytes > self.max_record_bytes {
                let missing: Vec<_> = self
                    .envelope
                    .iter()
                    .zip(&self.envelope_seen)
                    .filter(|(_, seen)| !**seen)
                    .map(|(name, _)| String::from_utf8_lossy(name).into_owned())
                    .collect();
                return Err(self.value_error(&format!(
                    "has more than max_record_bytes ({}) of records before its envelope \
                     member(s) {missing:?}: a value's records wait for its envelope up to \
                     that size",
                    self.max_record_bytes
                )));
            }
        }
        self.in_records = false;
        self.records_read = true;
        self.hold = false;
        // A value whose records array was read has no bad row to give.
        let mut none = Vec::new();
        self.finish_value(&mut none)?;
        Ok(())
    }

    /// Reads a value's members up to its records array (the envelope's kept), and enters
    /// the array; a bad row if the value is not an object, or holds no records array.
    fn open_value(&mut self, buf: &mut Vec<u8>) -> Result<Option<Next>, ConvertError> {
        self.envelope_text.clear();
        self.envelope_seen.fill(false);
        self.records_read = false;
        self.value_text.clear();
        if self.input.peek()? != Some(b'{') {
            self.input.value(Some(buf), self.max_record_bytes)?;
            buf.push(b'\n');
            return Ok(Some(Next::Bad(self.value_error("is not a JSON object"))));
        }
        self.input.bump();
        self.value_text.push(b'{');
        let mut first = true;
        loop {
            let Some(key) = self.next_member(std::mem::take(&mut first), true)? else {
                return self.finish_value(buf);
            };
            let name = key_text(&key);
            if name.is_some() && name == self.records && self.input.peek()? == Some(b'[') {
                self.input.bump();
                self.records_first = true;
                self.in_records = true;
                self.hold = self.envelope_seen.contains(&false);
                return Ok(None);
            }
            let wanted = name
                .as_deref()
                .and_then(|n| self.envelope.iter().position(|e| e == n));
            if let Some(i) = wanted {
                self.keep_envelope(i, &key)?;
                continue;
            }
            // Another member: kept for a rejected value's text as far as the limit allows.
            self.keep_text(&key);
            self.value_text.push(b':');
            let room = self.max_record_bytes.saturating_sub(self.value_text.len());
            let start = self.value_text.len();
            let over = self.input.value(Some(&mut self.value_text), room)?;
            if over {
                self.value_text.truncate(start);
            }
        }
    }

    /// After a value's records array: its other members read (an envelope member among
    /// them is kept: the records wait in `held` for it), up to the value's end; a bad row if
    /// it held no records array.
    fn finish_value(&mut self, buf: &mut Vec<u8>) -> Result<Option<Next>, ConvertError> {
        if !self.records_read {
            buf.extend_from_slice(&self.value_text);
            buf.push(b'\n');
            let records = String::from_utf8_lossy(self.records.as_deref().unwrap_or_default());
            return Ok(Some(Next::Bad(
                self.value_error(&format!("holds no {records:?} array of records")),
            )));
        }
        loop {
            let Some(key) = self.next_member(false, false)? else {
                return Ok(None);
            };
            let name = key_text(&key);
            if let Some(name) = name.as_deref() {
                if self.records.as_deref() == Some(name) {
                    return Err(self
                        .value_error(&format!("holds {:?} twice", String::from_utf8_lossy(name))));
                }
                if let Some(i) = self.envelope.iter().position(|e| e == name) {
                    self.keep_envelope(i, &key)?;
                    continue;
                }
            }
            self.input.value(None, usize::MAX)?;
        }
    }

    /// In an object, past the `,` (unless `first`) and the key and `:` of its next member, at
    /// its value: the key as written (quoted); `None` past the object's closing `}`. With
    /// `keep`, the `{`-side punctuation read goes to `value_text` (the rejects' text).
    fn next_member(&mut self, first: bool, keep: bool) -> Result<Option<Vec<u8>>, ConvertError> {
        self.input.skip_ws()?;
        match self.input.peek()? {
            Some(b'}') => {
                self.input.bump();
                if keep {
                    self.value_text.push(b'}');
                }
                return Ok(None);
            }
            Some(b',') if !first => {
                self.input.bump();
                if keep {
                    self.value_text.push(b',');
                }
                self.input.skip_ws()?;
            }
            Some(_) if first => {}
            Some(_) => return Err(self.structure("',' or '}' between the members of an object")),
            None => return Err(self.structure("the end of an object ('}')")),
        }
        if self.input.peek()? != Some(b'"') {
            return Err(self.structure("a key (a string)"));
        }
        let mut key = Vec::new();
        self.input.value(Some(&mut key), self.max_record_bytes)?;
        self.input.skip_ws()?;
        if self.input.peek()? != Some(b':') {
            return Err(self.structure("':' after a key"));
        }
        self.input.bump();
        self.input.skip_ws()?;
        Ok(Some(key))
    }

    /// Reads the value of the envelope member `i` (its key `key`) into `envelope_text`.
    fn keep_envelope(&mut self, i: usize, key: &[u8]) -> Result<(), ConvertError> {
        if self.envelope_seen[i] {
            return Err(self.value_error(&format!(
                "holds the envelope member {:?} twice",
                String::from_utf8_lossy(&self.envelope[i])
            )));
        }
        self.envelope_seen[i] = true;
        if !self.envelope_text.is_empty() {
            self.envelope_text.push(b',');
        }
        self.envelope_text.extend_from_slice(key);
        self.envelope_text.push(b':');
        let over = self
            .input
            .value(Some(&mut self.envelope_text), self.max_record_bytes)?;
        if over {
            return Err(self.value_error("has an envelope member longer than max_record_bytes"));
        }
        Ok(())
    }

    fn keep_text(&mut self, bytes: &[u8]) {
        if self.value_text.len() + bytes.len() <= self.max_record_bytes {
            self.value_text.extend_from_slice(bytes);
        }
    }

    /// What is wrong with the value in progress, at its start.
    fn value_error(&self, what: &str) -> ConvertError {
        let (line, value) = self.value_place;
        ConvertError::parse(Some(line), None, format!("value {value} {what}"))
    }

    /// The bytes do not have JSON's structure where the reader is: the object fails.
    fn structure(&self, expected: &str) -> ConvertError {
        let found = match self.input.peeked {
            Some(b) if b.is_ascii_graphic() => format!("{:?}", b as char),
            Some(b) => format!("byte 0x{b:02x}"),
            None => "the end of the input".to_owned(),
        };
        ConvertError::parse(
            Some(self.input.line),
            None,
            format!("not JSON: expected {expected}, found {found}"),
        )
    }
}

/// The record at `start` of `buf`, an object, with the envelope's members `envelope` put
/// first in it: `{"a":1}` → `{"logGroup":"g","a":1}`. A record that is not an object is left
/// as it is (the decoder refuses it).
fn envelop(buf: &mut Vec<u8>, start: usize, envelope: &[u8]) {
    if buf.get(start) != Some(&b'{') {
        return;
    }
    let empty = buf[start + 1..]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'}');
    let comma = (!empty).then_some(b',');
    buf.splice(start + 1..start + 1, envelope.iter().copied().chain(comma));
}

/// The text of a key (its quoted JSON string), unescaped; `None` if it does not read.
fn key_text(key: &[u8]) -> Option<Vec<u8>> {
    let inner = key.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if !inner.contains(&b'\\') {
        return Some(inner.to_vec());
    }
    serde_json::from_slice::<String>(key)
        .ok()
        .map(String::into_bytes)
}

/// The input, read a buffer at a time, with the line it is on.
struct Input<R> {
    reader: R,
    /// 1-based line of the next byte.
    line: u64,
    /// The byte last peeked at, for messages.
    peeked: Option<u8>,
}

impl<R: BufRead> Input<R> {
    fn peek(&mut self) -> Result<Option<u8>, ConvertError> {
        let b = self.reader.fill_buf()?.first().copied();
        self.peeked = b;
        Ok(b)
    }

    /// Steps past the byte peeked at (never a newline: a structural byte).
    fn bump(&mut self) {
        self.reader.consume(1);
    }

    fn skip_ws(&mut self) -> Result<(), ConvertError> {
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                return Ok(());
            }
            let len = chunk.len();
            let n = chunk
                .iter()
                .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(len);
            self.line += memchr::memchr_iter(b'\n', &chunk[..n]).count() as u64;
            self.reader.consume(n);
            if n < len {
                return Ok(());
            }
        }
    }

    /// Reads one JSON value (a string, an object, an array or a scalar), appending its
    /// bytes to `out` while they stay within `limit` (then the rest is read past, and
    /// `true` returned).
    fn value(&mut self, mut out: Option<&mut Vec<u8>>, limit: usize) -> Result<bool, ConvertError> {
        let mut scan = Scan::default();
        let start_line = self.line;
        let mut taken = 0usize;
        let mut over = false;
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                if scan.scalar {
                    return Ok(over);
                }
                let what = if scan.in_string {
                    "a string"
                } else {
                    "a value"
                };
                return Err(ConvertError::parse(
                    Some(start_line),
                    None,
                    format!("not JSON: the input ends inside {what}"),
                ));
            }
            let (n, done) = scan.feed(chunk).map_err(|message| {
                ConvertError::parse(Some(self.line), None, format!("not JSON: {message}"))
            })?;
            if let Some(out) = out.as_deref_mut() {
                if !over && taken + n <= limit {
                    out.extend_from_slice(&chunk[..n]);
                } else {
                    over = true;
                }
            }
            taken += n;
            self.line += memchr::memchr_iter(b'\n', &chunk[..n]).count() as u64;
            self.reader.consume(n);
            if done {
                return Ok(over);
            }
        }
    }
}

/// The extent of one JSON value, fed a buffer at a time. Only what finds its end is followed:
/// strings (and their escapes), and the brackets of the kind that opens the value (`{` and
/// `}` for an object, `[` and `]` for an array). Whether the brackets between match is left to
/// the decoder that reads the value (a record), or to the structure around it: a value cut
/// wrong fails there. Eight bytes are looked at a time ([`first_of`]): the runs between quotes
/// are short in records (a key, `":"`, a value), too short for a vectorised search's setup
/// (`memchr` per run cost 80% more instructions than the whole JSON Lines reading of
/// CloudTrail records, and a byte loop 11 instructions a byte).
#[derive(Default)]
struct Scan {
    /// The bracket that opens the value and the one that closes it.
    open: u8,
    close: u8,
    /// Brackets of the value's kind open.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// A number, `true`, `false` or `null`: it ends before the next delimiter.
    scalar: bool,
    started: bool,
}

impl Scan {
    /// How many bytes of `chunk` belong to the value, and whether it ends there.
    fn feed(&mut self, chunk: &[u8]) -> Result<(usize, bool), &'static str> {
        let mut i = 0;
        if !self.started {
            self.started = true;
            match chunk[0] {
                b'"' => self.in_string = true,
                b'{' => (self.open, self.close, self.depth) = (b'{', b'}', 1),
                b'[' => (self.open, self.close, self.depth) = (b'[', b']', 1),
                b'}' | b']' | b',' | b':' => return Err("a value was expected"),
                _ => self.scalar = true,
            }
            i = 1;
        }
        if self.scalar {
            let end = chunk[i..].iter().position(|b| {
                matches!(
                    b,
                    b' ' | b'\t' | b'\n' | b'\r' | b',' | b']' | b'}' | b'{' | b'[' | b'"' | b':'
                )
            });
            return Ok(end.map_or((chunk.len(), false), |k| (i + k, true)));
        }
        let (open, close) = (self.open, self.close);
        let n = chunk.len();
        loop {
            if self.in_string {
                if self.escaped {
                    if i == n {
                        return Ok((n, false));
                    }
                    self.escaped = false;
                    i += 1;
                }
                loop {
                    i += first_of(&chunk[i..], [b'"', b'\\', b'"']);
                    let Some(&b) = chunk.get(i) else {
                        return Ok((n, false));
                    };
                    i += 1;
                    if b == b'\\' {
                        if i == n {
                            self.escaped = true;
                            return Ok((n, false));
                        }
                        i += 1;
                    } else if b == b'"' {
                        break;
                    }
                }
                self.in_string = false;
                if self.depth == 0 {
                    return Ok((i, true));
                }
            }
            loop {
                i += first_of(&chunk[i..], [b'"', open, close]);
                let Some(&b) = chunk.get(i) else {
                    return Ok((n, false));
                };
                i += 1;
                if b == b'"' {
                    self.in_string = true;
                    break;
                } else if b == open {
                    self.depth += 1;
                } else if b == close {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Ok((i, true));
                    }
                }
            }
        }
    }
}

/// How many bytes of `bytes` come before the first that is one of `of` (all of them if none
/// is), eight at a time: a byte `b` of a word `w` equals `c` where `w ^ c·0x0101…` has a zero
/// byte, and the lowest zero byte of `v` is the lowest set bit of `(v - 0x0101…) & !v &
/// 0x8080…` (bits above it may be set wrongly, never below).
fn first_of(bytes: &[u8], of: [u8; 3]) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(LO) & !v & HI;
    let mut i = 0;
    while let Some(word) = bytes.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let m = zero(w ^ (LO * u64::from(of[0])))
            | zero(w ^ (LO * u64::from(of[1])))
            | zero(w ^ (LO * u64::from(of[2])));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + bytes[i..]
        .iter()
        .position(|b| of.contains(b))
        .unwrap_or(bytes.len() - i)
}

#[cfg(test)]
#[test]
fn first_of_finds_the_first_of_three_bytes_anywhere() {
    let mut next = super::super::testutil::xorshift(7);
    for _ in 0..20_000 {
        let len = (next() % 40) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| [b'a', b'"', b'{', b'}', 0x80, 0xff, 0x01][(next() % 7) as usize])
            .collect();
        let of = [b'"', b'{', b'}'];
        let expected = bytes.iter().position(|b| of.contains(b)).unwrap_or(len);
        assert_eq!(first_of(&bytes, of), expected, "{bytes:?}");
    }
}

/// The records of JSON documents, each its text (with the envelope's members put in it), as
/// the converter cuts them: see [`crate::convert::json_records`].
pub struct JsonRecords<R> {
    documents: Documents<R>,
    done: bool,
}

impl<R: BufRead> Iterator for JsonRecords<R> {
    type Item = Result<Vec<u8>, ConvertError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut buf = Vec::new();
        let next = match self.documents.next(&mut buf) {
            Ok(Next::Record(_)) => {
                buf.pop(); // its newline
                Some(Ok(buf))
            }
            Ok(Next::Bad(e)) => Some(Err(e)),
            Ok(Next::End) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        };
        self.done |= next.is_none();
        next
    }
}

/// The records of the JSON documents of `input`: see [`crate::convert::json_records`].
pub(in crate::convert) fn records<R: BufRead>(
    input: R,
    options: &JsonDocuments,
    max_record_bytes: usize,
) -> JsonRecords<R> {
    JsonRecords {
        documents: Documents::new(input, options, max_record_bytes),
        done: false,
    }
}
