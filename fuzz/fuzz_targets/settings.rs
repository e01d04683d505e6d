//! The installer's settings file (`--settings`, src/commands/install/settings.rs):
//! plexus's own keys or a Multus thick `daemon-config.json` as it is. Any
//! bytes must give settings or an error naming the key, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use plexus::commands::install::settings::Settings;

fuzz_target!(|data: &[u8]| {
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(data) {
        let _ = Settings::from_map(
            map,
            Path::new("/nonexistent-plexus-fuzz-root"),
            Some(Path::new("/run/plexus/plexus.sock")),
        );
    }
});
