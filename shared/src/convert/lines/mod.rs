//! Line logs (`"format": "regex"`): each line of the file matched, whole, against a pattern
//! whose named groups are the line's fields, as Athena's `RegexSerDe` and Glue's grok
//! classifiers read load balancer, CloudFront and S3 access logs.
//!
//! A matched line becomes the JSON object of its named groups (`{"client_ip":"10.0.0.1",…}`,
//! a group that did not take part, or whose text is one of the null markers, `null`), which the
//! JSON decoder reads as it reads a JSON line: columns by name (or by `path`, to rename a
//! group), values parsed from their text into the column's type (numbers, decimals, dates,
//! timestamps with their formats), unknown groups counted, bad values refused or rescued. A
//! line that does not match is a bad row naming its line (`on_bad_row`); blank lines and lines
//! starting with the comment prefix (CloudFront's `#Version:` and `#Fields:`) are skipped.

use std::io::{BufRead, Write};

use super::json::documents::{Next, Place};
use super::{ConvertError, LinePattern};

/// The records of a line log, one per matched line.
pub(in crate::convert) struct RegexLines<R> {
    reader: R,
    pattern: LinePattern,
    /// The pattern's named groups: index and name, JSON-quoted.
    groups: Vec<(usize, String)>,
    max_record_bytes: usize,
    /// Lines read so far.
    line: u64,
    text: Vec<u8>,
}

impl<R: BufRead> RegexLines<R> {
    pub(in crate::convert) fn new(
        reader: R,
        pattern: &LinePattern,
        max_record_bytes: usize,
    ) -> Self {
        let groups = pattern
            .regex
            .capture_names()
            .enumerate()
            .filter_map(|(i, name)| Some((i, serde_json::to_string(name?).ok()?)))
            .collect();
        Self {
            reader,
            pattern: pattern.clone(),
            groups,
            max_record_bytes,
            line: 0,
            text: Vec::new(),
        }
    }

    /// The next matched line, as a JSON object (and a newline) appended to `buf`.
    pub(in crate::convert) fn next(&mut self, buf: &mut Vec<u8>) -> Result<Next, ConvertError> {
        loop {
            self.text.clear();
            let limit = self.max_record_bytes.saturating_add(2);
            let read = super::json::read_line(&mut self.reader, &mut self.text, limit)?;
            if read == 0 {
                return Ok(Next::End);
            }
            self.line += 1;
            let place = Place::line(self.line);
            let mut line = &self.text[..];
            let whole = line.last() == Some(&b'\n');
            line = line.strip_suffix(b"\n").unwrap_or(line);
            line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.len() > self.max_record_bytes {
                buf.extend_from_slice(&line[..self.max_record_bytes]);
                buf.push(b'\n');
                if !whole {
                    super::json::skip_line(&mut self.reader)?;
                }
                let message = super::json::line_too_long(self.max_record_bytes);
                return Ok(Next::Bad(place.error(None, message)));
            }
            if line.trim_ascii().is_empty()
                || self
                    .pattern
                    .comment
                    .as_deref()
                    .is_some_and(|c| line.starts_with(c.as_bytes()))
            {
                continue;
            }
            let Ok(text) = simdutf8::basic::from_utf8(line) else {
                buf.extend_from_slice(line);
                buf.push(b'\n');
                return Ok(Next::Bad(place.error(None, "invalid UTF-8")));
            };
            let Some(caps) = self.pattern.regex.captures(text) else {
                buf.extend_from_slice(line);
                buf.push(b'\n');
                return Ok(Next::Bad(
                    place.error(None, "the line does not match the pattern"),
                ));
            };
            buf.push(b'{');
            for (n, (i, name)) in self.groups.iter().enumerate() {
                if n > 0 {
                    buf.push(b',');
                }
                buf.extend_from_slice(name.as_bytes());
                buf.push(b':');
                match caps.get(*i).map(|m| m.as_str()) {
                    Some(value) if !self.pattern.null_values.iter().any(|v| v == value) => {
                        serde_json::to_writer(&mut *buf, value).map_err(std::io::Error::from)?;
                    }
                    _ => buf.write_all(b"null")?,
                }
            }
            buf.extend_from_slice(b"}\n");
            return Ok(Next::Record(place));
        }
    }
}

#[cfg(test)]
mod tests;
