//! [`ObjectStore`] on local folders: each bucket is a sub-directory of a root, each key a file
//! under it, so a person can drop files into a landing folder and open the Parquet in the lake
//! folder with any tool. Semantics follow S3 as the port documents them: MD5 ETags
//! (`<md5 of the part md5s>-<n>` for multipart), user metadata, conditional writes, pinned
//! GETs, conditional deletes, listings in S3 order with pages of 1,000.
//!
//! # Layout of a bucket
//! | path | what |
//! |------|------|
//! | `<key as a path>` | the object's bytes, a plain file (see *Keys* below) |
//! | `.tidemark-meta/<hh>/<md5 of the key>.json` | sidecar: key, ETag, size, mtime and user metadata |
//! | `.tidemark-uploads/<upload id>/` | an open multipart upload: `upload.json` and one file per part |
//! | `.tidemark-tmp/` | files being written, renamed into place when complete |
//! | `.tidemark.lock` | the bucket's lock file |
//!
//! A sidecar is trusted only while the file's size and mtime are the ones it recorded. A file
//! placed or edited by hand has no such sidecar: its ETag is then the MD5 of its bytes and it
//! has no user metadata, exactly as if it had been uploaded with a single PUT.
//!
//! # Keys
//! A key is split on `/` and each segment becomes one path component. A segment that is a
//! safe plain file name stays as it is (`in/2024/orders 1.csv`, `你好/😊`). Any other segment
//! — empty (`a//b`, `/lead`, `trailing/`), `.` or `..`, starting with `%` or the reserved
//! `.tidemark`, or holding a control character — is written `%` followed by the segment with
//! `%` and control characters percent-encoded: `../escape` → `%../escape`, `%25` → `%%2525`,
//! `trailing/` → `trailing/%`. A `%` inside a segment stays as it is (`100%`, Hive's escaped
//! partition values such as `region=a%2Fb`), so a folder reader (DuckDB, a Delta reader)
//! finds every object under its key. The mapping is one-to-one, and no path leaves the
//! bucket or touches its hidden entries. A file whose name is not the encoding of any segment
//! (e.g. `%41` dropped by hand) is ignored, with a warning. Folders written by earlier
//! versions, which also encoded a `%` inside a segment (`100%` as `%100%25`), are read and
//! written where they are.
//!
//! Limits where S3 differs, inherent to a file tree: a key and keys below it as a folder
//! (`a` and `a/b`) cannot both exist (the second write fails with a permanent error); a key
//! segment is at most 255 bytes once encoded; on a case-insensitive or
//! normalisation-insensitive file system (macOS by default) keys differing only in case or
//! Unicode normalisation are the same object. Versioning is not supported (`version_id` is
//! `None`). Unlike S3, completing a multipart upload a second time fails (its parts are gone).
//!
//! # Concurrency
//! Writes are staged in temp files (fsynced) outside any lock; then, under the bucket's
//! exclusive file lock, the condition is checked and the files renamed into place. Reads of
//! one object take the shared lock while they open the file and read its sidecar. The locks
//! are `flock`-style locks on a fresh open of the lock file, so they exclude other threads
//! and other processes alike. Listings take no lock: like S3's, they are not a snapshot.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use async_trait::async_trait;
use bytes::Bytes;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use crate::error::{Retry, StoreError};
use crate::ports::{
    ByteRange, GetOutcome, ListPage, ObjectMeta, ObjectStore, PutOutcome, RangeOutcome,
    WriteCondition,
};

/// Objects per listing page, as S3's default `max-keys`.
const PAGE_SIZE: usize = 1000;
/// S3's minimum size of every part but the last.
const MIN_PART_SIZE: u64 = 5 << 20;
/// S3's highest part number.
const MAX_PART_NUMBER: i32 = 10_000;
/// S3's maximum key length in bytes.
const MAX_KEY_LEN: usize = 1024;
/// Longest file name most file systems accept, in bytes.
const MAX_NAME_LEN: usize = 255;
/// Names starting with this are the store's own; key segments like it are encoded.
const RESERVED: &str = ".tidemark";
const META_DIR: &str = ".tidemark-meta";
const UPLOADS_DIR: &str = ".tidemark-uploads";
const TMP_DIR: &str = ".tidemark-tmp";
const LOCK_FILE: &str = ".tidemark.lock";
const UPLOAD_FILE: &str = "upload.json";

/// Local folders behind the [`ObjectStore`] port: `<root>/<bucket>/<key>`.
#[derive(Debug, Clone)]
pub struct FolderStore {
    root: PathBuf,
}

impl FolderStore {
    /// The store whose buckets are the sub-directories of `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The folder holding the buckets.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Create bucket `name` (a sub-directory of the root, and the root itself if missing).
    /// Creating a bucket that exists is not an error.
    pub async fn create_bucket(&self, name: &str) -> Result<(), StoreError> {
        self.run("CreateBucket", name, "", |op| {
            let dir = op.bucket_path()?;
            fs::create_dir_all(&dir).map_err(|e| op.io(e))
        })
        .await
    }

    /// Run `f` on a blocking thread with the context of operation `op` on `bucket`/`key`.
    async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        bucket: &str,
        key: &str,
        f: impl FnOnce(&Op) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let op = Op {
            name: op,
            root: self.root.clone(),
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        };
        let (name, bucket, key) = (op.name, op.bucket.clone(), op.key.clone());
        tokio::task::spawn_blocking(move || f(&op))
            .await
            .unwrap_or_else(|e| {
                Err(StoreError {
                    op: name,
                    bucket,
                    key,
                    message: format!("worker thread failed: {e}"),
                    retry: Retry::Transient,
                })
            })
    }
}

/// One call: what it is on, for paths and errors.
struct Op {
    name: &'static str,
    root: PathBuf,
    bucket: String,
    key: String,
}

impl Op {
    /// A permanent error of this call.
    fn error(&self, message: impl Into<String>) -> StoreError {
        StoreError {
            op: self.name,
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            message: message.into(),
            retry: Retry::Permanent,
        }
    }

    /// An I/O error of this call.
    fn io(&self, e: io::Error) -> StoreError {
        use io::ErrorKind::{Interrupted, ResourceBusy, TimedOut, WouldBlock};
        StoreError {
            retry: if matches!(e.kind(), Interrupted | WouldBlock | TimedOut | ResourceBusy) {
                Retry::Transient
            } else {
                Retry::Permanent
            },
            ..self.error(e.to_string())
        }
    }

    /// An I/O error placing the key; names the file-versus-folder clash when that is the cause.
    fn placing(&self, e: io::Error) -> StoreError {
        use io::ErrorKind::{AlreadyExists, DirectoryNotEmpty, IsADirectory, NotADirectory};
        if matches!(
            e.kind(),
            AlreadyExists | DirectoryNotEmpty | IsADirectory | NotADirectory
        ) {
            self.error(format!(
                "{e}: a key and keys below it as a folder (`a` and `a/b`) cannot both exist \
                 in a folder store"
            ))
        } else {
            self.io(e)
        }
    }

    /// The bucket's directory, whether or not it exists.
    fn bucket_path(&self) -> Result<PathBuf, StoreError> {
        let b = &self.bucket;
        let valid = !b.is_empty()
            && b.len() <= MAX_NAME_LEN
            && !b.starts_with('.')
            && !b.contains(['/', '\\'])
            && !b.chars().any(char::is_control);
        if !valid {
            return Err(self.error(format!(
                "InvalidBucketName: {b:?} cannot name a folder (no `/`, `\\`, control characters \
                 or leading `.`)"
            )));
        }
        Ok(self.root.join(b))
    }

    /// The bucket, which must exist.
    fn bucket(&self) -> Result<Bucket, StoreError> {
        let dir = self.bucket_path()?;
        if !dir.is_dir() {
            return Err(self.error(format!("NoSuchBucket: no folder {}", dir.display())));
        }
        Ok(Bucket { dir })
    }

    /// The path of this call's key in `bucket`.
    fn object_path(&self, bucket: &Bucket) -> Result<PathBuf, StoreError> {
        key_path(&bucket.dir, &self.key).map_err(|m| self.error(m))
    }
}

/// The path of `key` under `dir`, or why the key cannot be stored.
fn key_path(dir: &Path, key: &str) -> Result<PathBuf, String> {
    if key.is_empty() {
        return Err("InvalidArgument: the key is empty".into());
    }
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "KeyTooLongError: the key is longer than {MAX_KEY_LEN} bytes"
        ));
    }
    let mut path = dir.to_path_buf();
    for segment in key.split('/') {
        let mut name = encode_segment(segment);
        // A segment an earlier version encoded, where it still is (one stat, only for a
        // segment holding `%`).
        if let Some(earlier) = earlier_name(segment)
            && path.join(&earlier).exists()
        {
            name = earlier;
        }
        if name.len() > MAX_NAME_LEN {
            return Err(format!(
                "KeyTooLongError: segment {segment:?} is longer than the {MAX_NAME_LEN} bytes a \
                 file name can hold"
            ));
        }
        path.push(name);
    }
    Ok(path)
}

/// Can `segment` be a file name as it is?
fn is_plain(segment: &str) -> bool {
    !segment.is_empty()
        && segment != "."
        && segment != ".."
        && !segment.starts_with(RESERVED)
        && !segment.starts_with('%')
        && !segment.chars().any(char::is_control)
}

/// The name an earlier version gave `segment` when it differs from today's: those versions
/// encoded every segment holding a `%`.
fn earlier_name(segment: &str) -> Option<String> {
    if !is_plain(segment) || !segment.contains('%') {
        return None;
    }
    Some(format!("%{}", segment.replace('%', "%25")))
}

/// The file name of one key segment (see the module docs).
fn encode_segment(segment: &str) -> String {
    if is_plain(segment) {
        return segment.to_owned();
    }
    let mut name = String::with_capacity(segment.len() + 1);
    name.push('%');
    for c in segment.chars() {
        if c == '%' || c.is_control() {
            for b in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(name, "%{b:02X}");
            }
        } else {
            name.push(c);
        }
    }
    name
}

/// The key segment a file name encodes, if it is the encoding of one.
fn decode_segment(name: &str) -> Option<String> {
    let segment = match name.strip_prefix('%') {
        Some(rest) => percent_encoding::percent_decode_str(rest)
            .decode_utf8()
            .ok()?
            .into_owned(),
        None => name.to_owned(),
    };
    (encode_segment(&segment) == name || earlier_name(&segment).as_deref() == Some(name))
        .then_some(segment)
}

/// Lower-case hex of a digest.
fn hex(digest: &[u8]) -> String {
    digest.iter().fold(String::with_capacity(32), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Copy `from` to the end of `to` (if any) while hashing it; returns the MD5 and the length.
fn copy_hashing(from: &mut impl Read, mut to: Option<&mut File>) -> io::Result<([u8; 16], u64)> {
    let mut md5 = Md5::new();
    let mut buf = vec![0; 64 << 10];
    let mut len = 0;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok((md5.finalize().into(), len)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        md5.update(&buf[..n]);
        if let Some(to) = to.as_mut() {
            to.write_all(&buf[..n])?;
        }
        len += n as u64;
    }
}

fn mtime_ns(stat: &fs::Metadata) -> u64 {
    stat.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn mtime_ms(stat: &fs::Metadata) -> i64 {
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    match stat
        .modified()
        .unwrap_or(UNIX_EPOCH)
        .duration_since(UNIX_EPOCH)
    {
        Ok(after) => ms(after),
        Err(before) => -ms(before.duration()),
    }
}

fn lowercase_keys(metadata: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    metadata
        .iter()
        .map(|(k, v)| (k.to_lowercase(), v.clone()))
        .collect()
}

/// What the store recorded of an object when it wrote it.
#[derive(Debug, Serialize, Deserialize)]
struct Sidecar {
    key: String,
    etag: String,
    size: u64,
    mtime_ns: u64,
    metadata: BTreeMap<String, String>,
}

/// An open multipart upload, as `upload.json` records it.
#[derive(Debug, Serialize, Deserialize)]
struct Upload {
    key: String,
    metadata: BTreeMap<String, String>,
}

/// A temp file that is removed unless it is renamed into place.
struct Temp(Option<PathBuf>);

impl Temp {
    /// Rename the file to `to` (atomically replacing what is there).
    fn persist(mut self, to: &Path) -> io::Result<()> {
        if let Some(from) = &self.0 {
            fs::rename(from, to)?;
            self.0 = None;
        }
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = fs::remove_file(path);
        }
    }
}

/// A new object written to temp files, waiting to be renamed into place.
struct Staged {
    content: Temp,
    sidecar: Temp,
    etag: String,
}

/// An object found on disk: its open file and its sidecar, if any.
struct Found {
    file: File,
    stat: fs::Metadata,
    sidecar: Option<Sidecar>,
}

impl Found {
    /// The object's metadata, and its file. The sidecar is used when it describes this very
    /// file; otherwise (a file placed or edited by hand, a write cut short) the ETag is the
    /// MD5 of the bytes, read from the file, and there is no user metadata.
    fn describe(mut self, key: &str) -> io::Result<(ObjectMeta, File)> {
        let size = self.stat.len();
        let (etag, metadata) = match self.sidecar {
            Some(s) if s.key == key && s.size == size && s.mtime_ns == mtime_ns(&self.stat) => {
                (s.etag, s.metadata)
            }
            _ => (hex(&copy_hashing(&mut self.file, None)?.0), BTreeMap::new()),
        };
        let meta = ObjectMeta {
            key: key.to_owned(),
            etag,
            size,
            version_id: None,
            last_modified: mtime_ms(&self.stat),
            metadata,
        };
        Ok((meta, self.file))
    }
}

/// An existing bucket directory.
struct Bucket {
    dir: PathBuf,
}

impl Bucket {
    fn sidecar_path(&self, key: &str) -> PathBuf {
        let h = hex(&Md5::digest(key.as_bytes()));
        self.dir
            .join(META_DIR)
            .join(&h[..2])
            .join(format!("{h}.json"))
    }

    /// Lock the bucket (shared or exclusive) until the returned file is dropped.
    fn lock(&self, op: &Op, exclusive: bool) -> Result<File, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join(LOCK_FILE))
            .map_err(|e| op.io(e))?;
        if exclusive {
            file.lock()
        } else {
            file.lock_shared()
        }
        .map_err(|e| op.io(e))?;
        Ok(file)
    }

    /// Open the object at `path`, if there is one, with its sidecar.
    fn find(&self, key: &str, path: &Path) -> io::Result<Option<Found>> {
        use io::ErrorKind::{IsADirectory, NotADirectory, NotFound};
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if matches!(e.kind(), NotFound | NotADirectory | IsADirectory) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let stat = file.metadata()?;
        if !stat.is_file() {
            return Ok(None);
        }
        let sidecar = match fs::read(self.sidecar_path(key)) {
            Ok(json) => serde_json::from_slice(&json).ok(),
            Err(e) if e.kind() == NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(Some(Found {
            file,
            stat,
            sidecar,
        }))
    }

    /// The current object under the call's key, described, if any. Takes the shared lock
    /// while opening it.
    fn read(&self, op: &Op, path: &Path) -> Result<Option<(ObjectMeta, File)>, StoreError> {
        let found = {
            let _lock = self.lock(op, false)?;
            self.find(&op.key, path).map_err(|e| op.io(e))?
        };
        found
            .map(|f| f.describe(&op.key))
            .transpose()
            .map_err(|e| op.io(e))
    }

    /// A new, empty temp file in the bucket.
    fn temp(&self) -> io::Result<(Temp, File)> {
        let dir = self.dir.join(TMP_DIR);
        fs::create_dir_all(&dir)?;
        let path = dir.join(uuid::Uuid::new_v4().simple().to_string());
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok((Temp(Some(path)), file))
    }

    /// Write a new object for the call's key to temp files: `write` fills the content and
    /// returns its ETag; the sidecar records it with `metadata`.
    fn stage(
        &self,
        op: &Op,
        metadata: BTreeMap<String, String>,
        write: impl FnOnce(&mut File) -> Result<String, StoreError>,
    ) -> Result<Staged, StoreError> {
        let (content, mut file) = self.temp().map_err(|e| op.io(e))?;
        let etag = write(&mut file)?;
        file.sync_all().map_err(|e| op.io(e))?;
        let stat = file.metadata().map_err(|e| op.io(e))?;
        let record = Sidecar {
            key: op.key.clone(),
            etag: etag.clone(),
            size: stat.len(),
            mtime_ns: mtime_ns(&stat),
            metadata,
        };
        let (sidecar, mut file) = self.temp().map_err(|e| op.io(e))?;
        let json = serde_json::to_vec(&record).map_err(|e| op.error(e.to_string()))?;
        file.write_all(&json)
            .and_then(|()| file.sync_all())
            .map_err(|e| op.io(e))?;
        Ok(Staged {
            content,
            sidecar,
            etag,
        })
    }

    /// Under the exclusive lock: if `condition` holds for the current object at `path`,
    /// rename the staged files into place.
    fn install(
        &self,
        op: &Op,
        path: &Path,
        staged: Staged,
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        let _lock = self.lock(op, true)?;
        let current = self
            .find(&op.key, path)
            .and_then(|found| found.map(|f| f.describe(&op.key)).transpose())
            .map_err(|e| op.io(e))?;
        let holds = match (condition, &current) {
            (WriteCondition::Absent, current) => current.is_none(),
            (WriteCondition::Matches(etag), Some((meta, _))) => meta.etag == *etag,
            (WriteCondition::Matches(_), None) => false,
        };
        if !holds {
            return Ok(PutOutcome::PreconditionFailed);
        }
        let parent = path.parent().unwrap_or(&self.dir);
        fs::create_dir_all(parent).map_err(|e| op.placing(e))?;
        staged.content.persist(path).map_err(|e| op.placing(e))?;
        let sidecar = self.sidecar_path(&op.key);
        fs::create_dir_all(sidecar.parent().unwrap_or(&self.dir))
            .and_then(|()| staged.sidecar.persist(&sidecar))
            .and_then(|()| File::open(parent)?.sync_all())
            .map_err(|e| op.io(e))?;
        Ok(PutOutcome::Written { etag: staged.etag })
    }

    /// The open upload `id` of the call's key.
    fn upload(&self, op: &Op, id: &str) -> Result<(PathBuf, Upload), StoreError> {
        let no_such = || op.error(format!("NoSuchUpload: no upload {id:?} of this key"));
        let is_id = id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !is_id {
            return Err(no_such());
        }
        let dir = self.dir.join(UPLOADS_DIR).join(id);
        let json = match fs::read(dir.join(UPLOAD_FILE)) {
            Ok(json) => json,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_such()),
            Err(e) => return Err(op.io(e)),
        };
        let upload: Upload = serde_json::from_slice(&json).map_err(|e| op.error(e.to_string()))?;
        if upload.key != op.key {
            return Err(no_such());
        }
        Ok((dir, upload))
    }

    /// Keys under `prefix` after `after`, in S3 order, below `dir` whose keys start with
    /// `base`: at most `limit` of them, with their paths.
    fn walk(
        &self,
        dir: &Path,
        base: &str,
        query: &Query<'_>,
        out: &mut Vec<(String, PathBuf)>,
    ) -> io::Result<()> {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            // Pruned by a concurrent delete.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut children = Vec::new();
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let Some(segment) = name.to_str().and_then(decode_segment) else {
                if !name.to_string_lossy().starts_with(RESERVED) {
                    tracing::warn!(
                        path = %entry.path().display(),
                        "ignored: the name is not a key the folder store can hold"
                    );
                }
                continue;
            };
            let is_dir = entry.file_type()?.is_dir();
            if !is_dir && !entry.path().is_file() {
                continue;
            }
            // Keys below a folder all start with `<folder>/`, so a folder sorts among its
            // siblings as that string: walking children in this order lists keys in S3 order.
            let mut full = format!("{base}{segment}");
            if is_dir {
                full.push('/');
            }
            children.push((full, is_dir, entry.path()));
        }
        children.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let after = |key: &str| query.after.is_none_or(|a| key > a);
        for (full, is_dir, path) in children {
            if out.len() == query.limit {
                break;
            }
            if is_dir {
                let under_prefix =
                    full.starts_with(query.prefix) || query.prefix.starts_with(&full);
                let some_after = after(&full) || query.after.is_some_and(|a| a.starts_with(&full));
                if under_prefix && some_after {
                    self.walk(&path, &full, query, out)?;
                }
            } else if full.starts_with(query.prefix) && after(&full) {
                out.push((full, path));
            }
        }
        Ok(())
    }
}

/// What a listing asks for.
struct Query<'a> {
    prefix: &'a str,
    after: Option<&'a str>,
    limit: usize,
}

#[async_trait]
impl ObjectStore for FolderStore {
    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectMeta>, StoreError> {
        self.run("HeadObject", bucket, key, |op| {
            let b = op.bucket()?;
            let path = op.object_path(&b)?;
            Ok(b.read(op, &path)?.map(|(meta, _)| meta))
        })
        .await
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<GetOutcome, StoreError> {
        let if_match = if_match.map(str::to_owned);
        self.run("GetObject", bucket, key, move |op| {
            let b = op.bucket()?;
            let path = op.object_path(&b)?;
            let Some((meta, mut file)) = b.read(op, &path)? else {
                return Ok(GetOutcome::NotFound);
            };
            if if_match.is_some_and(|etag| etag != meta.etag) {
                return Ok(GetOutcome::Changed);
            }
            file.rewind().map_err(|e| op.io(e))?;
            Ok(GetOutcome::Found {
                meta,
                body: Box::pin(tokio::fs::File::from_std(file)),
            })
        })
        .await
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        range: ByteRange,
        if_match: Option<&str>,
    ) -> Result<RangeOutcome, StoreError> {
        let if_match = if_match.map(str::to_owned);
        self.run("GetObject", bucket, key, move |op| {
            let b = op.bucket()?;
            let path = op.object_path(&b)?;
            let Some((meta, mut file)) = b.read(op, &path)? else {
                return Ok(RangeOutcome::NotFound);
            };
            if if_match.is_some_and(|etag| etag != meta.etag) {
                return Ok(RangeOutcome::Changed);
            }
            let (start, end) = match range {
                ByteRange::Suffix(n) => (meta.size.saturating_sub(n), meta.size),
                ByteRange::Span { start, end } => (start.min(meta.size), end.min(meta.size)),
            };
            let mut bytes = vec![0; end.saturating_sub(start) as usize];
            file.seek(io::SeekFrom::Start(start))
                .and_then(|_| file.read_exact(&mut bytes))
                .map_err(|e| op.io(e))?;
            Ok(RangeOutcome::Found {
                meta,
                bytes: Bytes::from(bytes),
            })
        })
        .await
    }

    async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        metadata: &BTreeMap<String, String>,
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        let (metadata, condition) = (lowercase_keys(metadata), condition.clone());
        self.run("PutObject", bucket, key, move |op| {
            let b = op.bucket()?;
            let path = op.object_path(&b)?;
            let staged = b.stage(op, metadata, |file| {
                file.write_all(&body).map_err(|e| op.io(e))?;
                Ok(hex(&Md5::digest(&body)))
            })?;
            b.install(op, &path, staged, &condition)
        })
        .await
    }

    async fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<String, StoreError> {
        let metadata = lowercase_keys(metadata);
        self.run("CreateMultipartUpload", bucket, key, move |op| {
            let b = op.bucket()?;
            op.object_path(&b)?;
            let id = uuid::Uuid::new_v4().simple().to_string();
            let dir = b.dir.join(UPLOADS_DIR).join(&id);
            let upload = Upload {
                key: op.key.clone(),
                metadata,
            };
            let json = serde_json::to_vec(&upload).map_err(|e| op.error(e.to_string()))?;
            fs::create_dir_all(&dir)
                .and_then(|()| fs::write(dir.join(UPLOAD_FILE), json))
                .map_err(|e| op.io(e))?;
            Ok(id)
        })
        .await
    }

    async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<String, StoreError> {
        let upload_id = upload_id.to_owned();
        self.run("UploadPart", bucket, key, move |op| {
            let b = op.bucket()?;
            let (dir, _) = b.upload(op, &upload_id)?;
            if !(1..=MAX_PART_NUMBER).contains(&part_number) {
                return Err(op.error(format!(
                    "InvalidArgument: part number {part_number} is not in 1..={MAX_PART_NUMBER}"
                )));
            }
            let (temp, mut file) = b.temp().map_err(|e| op.io(e))?;
            file.write_all(&body)
                .and_then(|()| file.sync_all())
                .and_then(|()| temp.persist(&dir.join(part_number.to_string())))
                .map_err(|e| op.io(e))?;
            Ok(hex(&Md5::digest(&body)))
        })
        .await
    }

    async fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(i32, String)],
        condition: &WriteCondition,
    ) -> Result<PutOutcome, StoreError> {
        let (upload_id, parts, condition) =
            (upload_id.to_owned(), parts.to_vec(), condition.clone());
        self.run("CompleteMultipartUpload", bucket, key, move |op| {
            let b = op.bucket()?;
            let path = op.object_path(&b)?;
            let (dir, upload) = b.upload(op, &upload_id)?;
            if parts.is_empty() {
                return Err(op.error("MalformedXML: no parts"));
            }
            if !parts.windows(2).all(|w| w[0].0 < w[1].0) {
                return Err(op.error("InvalidPartOrder: part numbers must ascend"));
            }
            let staged = b.stage(op, upload.metadata, |file| {
                let mut md5s = Md5::new();
                for (i, (n, etag)) in parts.iter().enumerate() {
                    let invalid = || op.error(format!("InvalidPart: part {n} with ETag {etag}"));
                    let mut part = match File::open(dir.join(n.to_string())) {
                        Ok(part) => part,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(invalid()),
                        Err(e) => return Err(op.io(e)),
                    };
                    let (md5, len) = copy_hashing(&mut part, Some(file)).map_err(|e| op.io(e))?;
                    if hex(&md5) != etag.trim_matches('"') {
                        return Err(invalid());
                    }
                    if len < MIN_PART_SIZE && i + 1 < parts.len() {
                        return Err(op.error(format!(
                            "EntityTooSmall: part {n} is {len} bytes; all parts but the last \
                             need at least {MIN_PART_SIZE}"
                        )));
                    }
                    md5s.update(md5);
                }
                Ok(format!("{}-{}", hex(&md5s.finalize()), parts.len()))
            })?;
            let outcome = b.install(op, &path, staged, &condition)?;
            if matches!(outcome, PutOutcome::Written { .. })
                && let Err(e) = fs::remove_dir_all(&dir)
            {
                tracing::warn!(upload = %dir.display(), error = %e, "completed upload not cleaned up");
            }
            Ok(outcome)
        })
        .await
    }

    async fn abort_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        let upload_id = upload_id.to_owned();
        self.run("AbortMultipartUpload", bucket, key, move |op| {
            let b = op.bucket()?;
            let (dir, _) = b.upload(op, &upload_id)?;
            fs::remove_dir_all(dir).map_err(|e| op.io(e))
        })
        .await
    }

    async fn delete(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&str>,
    ) -> Result<bool, StoreError> {
        let if_match = if_match.map(str::to_owned);
        self.run("DeleteObject", bucket, key, move |op| {
            let b = op.bucket()?;
            let path = op.object_path(&b)?;
            let _lock = b.lock(op, true)?;
            let Some(found) = b.find(&op.key, &path).map_err(|e| op.io(e))? else {
                return Ok(false);
            };
            if let Some(etag) = if_match {
                let (meta, _) = found.describe(&op.key).map_err(|e| op.io(e))?;
                if meta.etag != etag {
                    return Ok(false);
                }
            }
            fs::remove_file(&path).map_err(|e| op.io(e))?;
            match fs::remove_file(b.sidecar_path(&op.key)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(op.io(e)),
                _ => {}
            }
            // S3 has no folders: remove the ones this delete emptied, so that they neither
            // linger nor block a later key of the same name.
            let mut dir = path.parent();
            while let Some(d) = dir
                && d != b.dir
                && fs::remove_dir(d).is_ok()
            {
                dir = d.parent();
            }
            Ok(true)
        })
        .await
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        page_token: Option<&str>,
    ) -> Result<ListPage, StoreError> {
        let after = page_token.map(str::to_owned);
        self.run("ListObjectsV2", bucket, prefix, move |op| {
            let b = op.bucket()?;
            let query = Query {
                prefix: &op.key,
                after: after.as_deref(),
                limit: PAGE_SIZE + 1,
            };
            let mut keys = Vec::new();
            b.walk(&b.dir, "", &query, &mut keys)
                .map_err(|e| op.io(e))?;
            let next = (keys.len() > PAGE_SIZE).then(|| {
                keys.truncate(PAGE_SIZE);
                keys[PAGE_SIZE - 1].0.clone()
            });
            let mut objects = Vec::with_capacity(keys.len());
            for (key, path) in keys {
                // Gone since the walk: not listed. S3 lists no user metadata.
                if let Some(found) = b.find(&key, &path).map_err(|e| op.io(e))? {
                    let (meta, _) = found.describe(&key).map_err(|e| op.io(e))?;
                    objects.push(ObjectMeta {
                        metadata: BTreeMap::new(),
                        ..meta
                    });
                }
            }
            Ok(ListPage { objects, next })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key a path under `dir` stands for, the way listings decode it.
    fn key_of(dir: &Path, path: &Path) -> Option<String> {
        let segments: Option<Vec<String>> = path
            .strip_prefix(dir)
            .ok()?
            .iter()
            .map(|name| decode_segment(name.to_str()?))
            .collect();
        Some(segments?.join("/"))
    }

    const AWKWARD: &[&str] = &[
        "plain.csv",
        "in/2024/03/orders 1.csv",
        "a b",
        "a+b",
        "100%",
        "%",
        "%25",
        "%2F",
        "你好/😊",
        "x?y#z",
        "a//b",
        "//",
        "/",
        "/lead",
        "trailing/",
        ".",
        "..",
        "../escape",
        "a/../../b",
        "./x",
        "...",
        ".hidden",
        ".tidemark-meta",
        ".tidemark.lock",
        "in/.tidemark-tmp/x",
        "tab\there",
        "new\nline",
        "nul\0byte",
        "c1\u{85}control",
        "back\\slash",
    ];

    #[test]
    fn keys_round_trip_through_paths() {
        let dir = Path::new("/srv/buckets/landing");
        for key in AWKWARD {
            let path = key_path(dir, key).unwrap();
            assert_eq!(
                key_of(dir, &path).as_deref(),
                Some(*key),
                "{key:?} → {path:?}"
            );
        }
    }

    #[test]
    fn no_key_escapes_the_bucket_or_reaches_hidden_entries() {
        use std::path::Component;
        let dir = Path::new("/srv/buckets/landing");
        for key in AWKWARD {
            let path = key_path(dir, key).unwrap();
            let rel = path.strip_prefix(dir).unwrap();
            assert!(
                rel.components().all(|c| matches!(c, Component::Normal(_))),
                "{key:?} → {path:?}"
            );
            let first = rel.iter().next().unwrap().to_str().unwrap();
            assert!(!first.starts_with(RESERVED), "{key:?} → {path:?}");
            assert!(
                rel.iter().all(|n| !n.is_empty() && n.len() <= MAX_NAME_LEN),
                "{key:?}"
            );
        }
    }

    #[test]
    fn distinct_keys_get_distinct_paths() {
        let dir = Path::new("/b");
        let paths: std::collections::HashSet<_> =
            AWKWARD.iter().map(|k| key_path(dir, k).unwrap()).collect();
        assert_eq!(paths.len(), AWKWARD.len());
    }

    #[test]
    fn plain_names_stay_readable() {
        let dir = Path::new("/b");
        assert_eq!(
            key_path(dir, "in/2024/orders 1.csv").unwrap(),
            Path::new("/b/in/2024/orders 1.csv")
        );
        assert_eq!(key_path(dir, "你好/😊").unwrap(), Path::new("/b/你好/😊"));
        assert_eq!(
            key_path(dir, "../escape").unwrap(),
            Path::new("/b/%../escape")
        );
        assert_eq!(
            key_path(dir, "trailing/").unwrap(),
            Path::new("/b/trailing/%")
        );
        assert_eq!(key_path(dir, "100%").unwrap(), Path::new("/b/100%"));
        assert_eq!(
            key_path(dir, "dt=2026-11-29/region=a%2Fb/x.parquet").unwrap(),
            Path::new("/b/dt=2026-11-29/region=a%2Fb/x.parquet")
        );
        assert_eq!(key_path(dir, "%25").unwrap(), Path::new("/b/%%2525"));
    }

    #[test]
    fn folders_of_earlier_versions_are_read_and_written_where_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let earlier = dir.path().join("%in%25").join("%100%25");
        std::fs::create_dir_all(earlier.parent().unwrap()).unwrap();
        std::fs::write(&earlier, b"x").unwrap();
        assert_eq!(key_path(dir.path(), "in%/100%").unwrap(), earlier);
        assert_eq!(key_of(dir.path(), &earlier).as_deref(), Some("in%/100%"));
        assert_eq!(
            key_path(dir.path(), "in%/new%").unwrap(),
            dir.path().join("%in%25").join("new%")
        );
    }

    #[test]
    fn names_that_encode_no_key_are_not_keys() {
        for name in [
            "%41",
            "%2f",
            "%abc",
            ".tidemark-meta",
            ".",
            "..",
            "%%",
            "%%2",
        ] {
            assert_eq!(decode_segment(name), None, "{name:?}");
        }
    }

    #[test]
    fn unstorable_keys_are_refused() {
        let dir = Path::new("/b");
        assert!(key_path(dir, "").is_err());
        assert!(key_path(dir, &"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(key_path(dir, &format!("{}/x", "s".repeat(256))).is_err());
        assert!(key_path(dir, &format!("{}/x", "s".repeat(255))).is_ok());
    }

    #[tokio::test]
    async fn bucket_names_cannot_leave_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FolderStore::new(tmp.path().join("root"));
        for name in ["..", ".", "", "a/b", "../x", ".tidemark-meta"] {
            assert!(store.create_bucket(name).await.is_err(), "{name:?}");
        }
        assert!(!tmp.path().join("x").exists());
    }

    #[tokio::test]
    async fn awkward_keys_stay_inside_the_bucket() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FolderStore::new(tmp.path().join("root"));
        store.create_bucket("b").await.unwrap();
        // Leave out the keys that have keys below them as a folder (`..` and `../escape`):
        // a file tree cannot hold both.
        let keys: Vec<_> = AWKWARD
            .iter()
            .filter(|k| !AWKWARD.iter().any(|o| o.starts_with(&format!("{k}/"))))
            .collect();
        for key in &keys {
            let put = store
                .put(
                    "b",
                    key,
                    Bytes::from_static(b"x"),
                    &BTreeMap::new(),
                    &WriteCondition::Absent,
                )
                .await
                .unwrap();
            assert!(matches!(put, PutOutcome::Written { .. }), "{key:?}");
        }
        let outside: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(outside, ["root"]);
        let root: Vec<_> = fs::read_dir(tmp.path().join("root"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(root, ["b"]);
        let listed = store.list("b", "", None).await.unwrap();
        let mut expected: Vec<_> = keys.iter().map(|k| k.to_string()).collect();
        expected.sort();
        let listed: Vec<_> = listed.objects.into_iter().map(|o| o.key).collect();
        assert_eq!(listed, expected);
    }

    #[tokio::test]
    async fn a_file_placed_by_hand_is_an_object_with_its_md5() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FolderStore::new(tmp.path());
        store.create_bucket("landing").await.unwrap();
        fs::create_dir_all(tmp.path().join("landing/in")).unwrap();
        fs::write(tmp.path().join("landing/in/orders 1.csv"), "hello").unwrap();
        fs::write(tmp.path().join("landing/in/50%.csv"), "a key").unwrap();
        fs::write(tmp.path().join("landing/in/%41"), "not a key").unwrap();
        let meta = store
            .head("landing", "in/orders 1.csv")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.etag, "5d41402abc4b2a76b9719d911017c592");
        assert_eq!(meta.size, 5);
        let keys: Vec<_> = store
            .list("landing", "in/", None)
            .await
            .unwrap()
            .objects
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(keys, ["in/50%.csv", "in/orders 1.csv"]);

        // Edited by hand after a PUT: the sidecar no longer describes the file.
        let put = store
            .put(
                "landing",
                "in/orders 1.csv",
                Bytes::from_static(b"hi"),
                &BTreeMap::from([("k".to_string(), "v".to_string())]),
                &WriteCondition::Matches(meta.etag),
            )
            .await
            .unwrap();
        assert!(matches!(put, PutOutcome::Written { .. }));
        fs::write(tmp.path().join("landing/in/orders 1.csv"), "hello, world").unwrap();
        let meta = store
            .head("landing", "in/orders 1.csv")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.etag, "e4d7f1b4ed2e42d15898f4b27b019da4");
        assert!(meta.metadata.is_empty());
    }

    #[tokio::test]
    async fn a_key_and_keys_below_it_clash_with_a_permanent_error() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FolderStore::new(tmp.path());
        store.create_bucket("b").await.unwrap();
        let none = BTreeMap::new();
        let put = |key: &'static str| {
            store.put(
                "b",
                key,
                Bytes::from_static(b"x"),
                &none,
                &WriteCondition::Absent,
            )
        };
        put("a").await.unwrap();
        let e = put("a/b").await.unwrap_err();
        assert_eq!(e.retry, Retry::Permanent);
        assert!(e.message.contains("cannot both exist"), "{e}");
        // A delete removes the folders it emptied, so the name is free again.
        put("c/d/e").await.unwrap();
        assert!(store.delete("b", "c/d/e", None).await.unwrap());
        assert!(!tmp.path().join("b/c").exists());
        put("c").await.unwrap();
    }
}
