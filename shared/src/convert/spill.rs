//! Where the Parquet writer keeps a row group's finished pages until the group is written.
//!
//! Parquet wants each column chunk contiguous while batches arrive with every column at
//! once, so the writer holds all of a row group's compressed pages until the group closes:
//! on the heap, that is as much memory as the row group is large (64 MiB by default: on rows
//! of 30 columns, more than all the rest of the converter's memory). [`PageStores`] keeps pages
//! in memory up to a budget shared by the columns of a conversion and appends the rest to an
//! anonymous temporary file per column chunk (removed when the chunk is written or the
//! conversion abandoned), so memory no longer grows with the row group. Small files never
//! touch the disk; a row group of a large one is written to the temporary directory once and
//! read back once (`TMPDIR`, else `/tmp`: Lambda's ephemeral storage, 512 MB by default, holds
//! a row group of the default size with room to spare). The output is the same bytes
//! wherever the pages waited.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parquet::arrow::arrow_writer::{PageKey, PageStore, PageStoreArgs, PageStoreFactory};
use parquet::errors::{ParquetError, Result};

/// Makes the [`PageStore`] of each column chunk of a conversion; they share one budget of
/// bytes kept in memory.
#[derive(Debug)]
pub(crate) struct PageStores {
    budget: usize,
    /// Bytes of pages held in memory by all its stores.
    resident: Arc<AtomicUsize>,
}

#[cfg(test)]
thread_local! {
    /// Bytes of pages this thread has written to temporary files, for the tests.
    pub(crate) static SPILLED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl PageStores {
    /// Stores keeping at most `budget` bytes of pages in memory between them.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            budget,
            resident: Arc::default(),
        }
    }

    fn store(&self) -> Store {
        Store {
            budget: self.budget,
            shared: self.resident.clone(),
            blobs: Vec::new(),
            resident: 0,
            file: None,
            file_len: 0,
        }
    }
}

impl PageStoreFactory for PageStores {
    fn create(&self, _args: &PageStoreArgs<'_>) -> Result<Box<dyn PageStore>> {
        Ok(Box::new(self.store()))
    }
}

/// One column chunk's pages: in memory while the shared budget allows, else in its file.
struct Store {
    budget: usize,
    /// [`PageStores::resident`].
    shared: Arc<AtomicUsize>,
    blobs: Vec<Blob>,
    /// Bytes of `blobs` in memory, returned to the budget when taken or dropped.
    resident: usize,
    file: Option<File>,
    file_len: u64,
}

enum Blob {
    Memory(Bytes),
    File { offset: u64, len: usize },
    Taken,
}

fn spill_error(e: std::io::Error) -> ParquetError {
    ParquetError::General(format!(
        "cannot keep a row group's pages in a temporary file: {e}"
    ))
}

impl Store {
    /// Counts `len` bytes against the budget if they fit.
    fn reserve(&self, len: usize) -> bool {
        self.shared
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |resident| {
                resident.checked_add(len).filter(|&r| r <= self.budget)
            })
            .is_ok()
    }

    fn write(&mut self, value: &[u8]) -> std::io::Result<u64> {
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(tempfile::tempfile()?),
        };
        let offset = self.file_len;
        file.seek(SeekFrom::Start(offset))?;
        file.write_all(value)?;
        self.file_len += value.len() as u64;
        Ok(offset)
    }
}

impl PageStore for Store {
    fn put(&mut self, value: Bytes) -> Result<PageKey> {
        let key = PageKey::new(self.blobs.len() as u64);
        let len = value.len();
        if self.reserve(len) {
            self.resident += len;
            self.blobs.push(Blob::Memory(value));
        } else {
            let offset = self.write(&value).map_err(spill_error)?;
            #[cfg(test)]
            SPILLED.with(|spilled| spilled.set(spilled.get() + len));
            self.blobs.push(Blob::File { offset, len });
        }
        Ok(key)
    }

    fn take(&mut self, key: PageKey) -> Result<Bytes> {
        let slot = usize::try_from(key.get())
            .ok()
            .and_then(|i| self.blobs.get_mut(i))
            .ok_or_else(|| ParquetError::General(format!("invalid page key {}", key.get())))?;
        match std::mem::replace(slot, Blob::Taken) {
            Blob::Memory(value) => {
                self.resident -= value.len();
                self.shared.fetch_sub(value.len(), Ordering::Relaxed);
                Ok(value)
            }
            Blob::File { offset, len } => {
                let file = self
                    .file
                    .as_mut()
                    .expect("a page in the file made the file");
                let mut value = vec![0; len];
                file.seek(SeekFrom::Start(offset)).map_err(spill_error)?;
                file.read_exact(&mut value).map_err(spill_error)?;
                Ok(value.into())
            }
            Blob::Taken => Err(ParquetError::General(format!(
                "page key {} taken twice",
                key.get()
            ))),
        }
    }

    fn memory_size(&self) -> usize {
        self.resident
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.shared.fetch_sub(self.resident, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_past_the_budget_wait_in_a_file_and_come_back_whole() {
        let spilled = || SPILLED.with(|s| s.get());
        let before = spilled();
        let stores = PageStores::new(10);
        let (mut a, mut b) = (stores.store(), stores.store());
        let pages: Vec<Bytes> = (0..6u8).map(|i| Bytes::from(vec![i; 4])).collect();
        let keys: Vec<_> = pages
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let s = if i % 2 == 0 { &mut a } else { &mut b };
                s.put(p.clone()).unwrap()
            })
            .collect();
        // Two pages of 4 bytes fit the budget of 10 between both stores; four do not.
        assert_eq!(spilled() - before, 16);
        assert_eq!(a.memory_size() + b.memory_size(), 8);
        for (i, key) in keys.iter().enumerate().rev() {
            let s = if i % 2 == 0 { &mut a } else { &mut b };
            assert_eq!(s.take(*key).unwrap(), pages[i]);
        }
        assert_eq!(a.memory_size() + b.memory_size(), 0);
        assert!(a.take(keys[0]).is_err(), "a page is taken once");
        // What the stores gave back is free for the next ones.
        let mut c = stores.store();
        c.put(Bytes::from(vec![9; 10])).unwrap();
        assert_eq!((c.memory_size(), spilled() - before), (10, 16));
        drop(c);
        let mut d = stores.store();
        d.put(Bytes::from(vec![9; 10])).unwrap();
        assert_eq!(
            (d.memory_size(), spilled() - before),
            (10, 16),
            "a dropped store's pages are freed"
        );
    }
}
