//! One `kubectl get --watch -o json`, each object it prints stamped with the
//! instant it arrived. Two instants of the same watch carry the same
//! delays (API server, kubectl, pipe), so their difference is the time
//! between the two changes on the API server, not a polling interval.

use std::io::BufReader;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use serde_json::Value;

/// The running watch; kubectl is killed on drop.
pub(crate) struct Watch {
    child: Child,
    /// Every object the watch printed, with when it arrived.
    pub(crate) events: mpsc::Receiver<(Instant, Value)>,
}

impl Watch {
    /// Starts `kubectl` (with its kubeconfig options) with `args` and
    /// `--watch -o json` appended.
    pub(crate) fn start(mut kubectl: Command, args: &[&str]) -> Result<Watch, String> {
        let mut child = kubectl
            .args(args)
            .args(["--watch", "-o", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("kubectl --watch: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            let objects = serde_json::Deserializer::from_reader(BufReader::new(stdout));
            for object in objects.into_iter::<Value>().map_while(Result::ok) {
                if tx.send((Instant::now(), object)).is_err() {
                    return;
                }
            }
        });
        Ok(Watch { child, events })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
