//! The columnar formats, Parquet, Avro and ORC: each file's own schema is read, projected
//! onto the leaves the source's columns name ([`arrays`]), and its values cast to their types
//! row by row where they are not already ([`typed`]).

pub(crate) mod arrays;
pub(in crate::convert) mod avro;
pub(in crate::convert) mod orc;
// Not `mod parquet`, which would shadow the crate of that name here.
#[path = "parquet.rs"]
pub(crate) mod parquet_input;
pub(crate) mod typed;

use super::*;
