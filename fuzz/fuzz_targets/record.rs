//! A record file of the cache directory (`src/record.rs`), as DEL, CHECK and
//! GC read it after anything may have happened to it (a crash mid-append, a
//! hand edit, a disk error): any bytes must give a record or an error, never
//! a panic. A record that parses writes back to itself (the one serde type
//! reads and writes it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus::record::Record;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = Record::from_file(data) {
        let again = Record::from_value(&record.to_value()).expect("a written record reads back");
        assert_eq!(again, record);
    }
});
