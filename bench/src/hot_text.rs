//! `--hot-functions OUT`: the functions of plexus that CNI calls run, in the
//! order they first run, for the linker to gather at the start of .text
//! (`bench/hot-text/`).
//!
//! Each call is single-stepped under ptrace: ADD, then DEL, of the
//! benchmark's bridge and macvlan networks, after a few untraced pods so the
//! IPAM and cache directories are not empty. Each instruction's address is
//! looked up in the binary's symbol table (`nm`), and the names go through
//! `hot-text-gcc --normalise`, as the linker wrapper reads them. Only the
//! calling thread is traced, which is all an ADD or DEL runs on.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use plexus_dataplane::NetNs;
use serde_json::Value;

use crate::{cni_env, command, invoke, node, scenarios, with_prev_result, Namespaces};

/// Untraced pods before the traced one.
const WARM_UP_PODS: usize = 3;
/// A bound on one traced call (an ADD runs about a million instructions).
const MAX_STEPS: u64 = 50_000_000;

pub struct Setup<'a> {
    pub plexus: &'a Path,
    pub reference_dir: &'a Path,
    pub namespaces: &'a mut Namespaces,
    pub tmp: &'a Path,
}

/// The linker wrapper, which also normalises names.
fn wrapper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-text/hot-text-gcc")
}

pub fn run(setup: Setup<'_>, out: &Path) -> Result<(), String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("--hot-functions reads x86_64 registers only".into());
    }
    let symbols = Symbols::read(setup.plexus)?;
    let pid = std::process::id();
    let node = node(setup.namespaces, pid)?;
    let mut trace = Trace::new(&symbols);
    // ADDs first: they are what the layout is for.
    let mut dels = Vec::new();
    for (n, scenario) in scenarios(&setup.tmp.join("ipam"), &setup.tmp.join("cache"))
        .into_iter()
        .enumerate()
    {
        let conf = scenario.plexus.to_string();
        for i in 0..=WARM_UP_PODS {
            let pod = setup.namespaces.create(format!("pxb-{pid}-{n}h{i}"))?;
            let id = format!("hot{n}-{i}");
            let env = cni_env("ADD", &id, &pod, setup.reference_dir);
            let traced = i == WARM_UP_PODS;
            let result = if traced {
                trace.call(&node, setup.plexus, &env, conf.as_bytes())?
            } else {
                invoke(&node, setup.plexus, &[], &env, conf.as_bytes())?.stdout
            };
            let result: Value =
                serde_json::from_slice(&result).map_err(|e| format!("ADD result: {e}"))?;
            let del_env = cni_env("DEL", &id, &pod, setup.reference_dir);
            dels.push((del_env, with_prev_result(&scenario.plexus, &result), traced));
        }
    }
    // The traced pods' DELs (each scenario's last), then the others untraced.
    for (env, stdin, _) in dels.iter().filter(|(_, _, traced)| *traced) {
        trace.call(&node, setup.plexus, env, stdin)?;
    }
    for (env, stdin, _) in dels.iter().filter(|(_, _, traced)| !*traced) {
        invoke(&node, setup.plexus, &[], env, stdin)?;
    }

    let names = normalise(trace.order.iter().map(|&i| symbols.names[i].as_str()))?;
    let mut unique = std::collections::HashSet::new();
    let mut text = String::from(
        "# The functions plexus's CNI calls run, in first-run order: read by\n\
         # hot-text-gcc, written by `plexus-bench --hot-functions` (README.md).\n",
    );
    for name in names.iter().filter(|n| unique.insert(n.as_str())) {
        text.push_str(name);
        text.push('\n');
    }
    std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    let bytes: u64 = trace.order.iter().map(|&i| symbols.sizes[i]).sum();
    println!(
        "plexus-bench: {} functions ({} KiB of code) in {}",
        unique.len(),
        bytes / 1024,
        out.display()
    );
    Ok(())
}

/// The binary's functions, sorted by address.
struct Symbols {
    starts: Vec<u64>,
    sizes: Vec<u64>,
    names: Vec<String>,
}

impl Symbols {
    fn read(binary: &Path) -> Result<Symbols, String> {
        let out = Command::new("nm")
            .args(["--defined-only", "-n", "-S"])
            .arg(binary)
            .output()
            .map_err(|e| format!("nm: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "nm {}: {}",
                binary.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut symbols = Symbols {
            starts: Vec::new(),
            sizes: Vec::new(),
            names: Vec::new(),
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [start, size, kind, name] = fields[..] else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let (Ok(start), Ok(size)) = (
                u64::from_str_radix(start, 16),
                u64::from_str_radix(size, 16),
            ) else {
                continue;
            };
            symbols.starts.push(start);
            symbols.sizes.push(size);
            symbols.names.push(name.to_string());
        }
        if symbols.names.is_empty() {
            return Err(format!(
                "{}: no function symbols (stripped?)",
                binary.display()
            ));
        }
        Ok(symbols)
    }

    /// The function containing `address`.
    fn find(&self, address: u64) -> Option<usize> {
        let i = self
            .starts
            .partition_point(|&s| s <= address)
            .checked_sub(1)?;
        (address < self.starts[i] + self.sizes[i].max(1)).then_some(i)
    }
}

/// The functions single-stepped calls ran, in first-run order.
struct Trace<'s> {
    symbols: &'s Symbols,
    seen: Vec<bool>,
    order: Vec<usize>,
}

impl<'s> Trace<'s> {
    fn new(symbols: &'s Symbols) -> Self {
        Trace {
            symbols,
            seen: vec![false; symbols.names.len()],
            order: Vec::new(),
        }
    }

    /// Runs `program` as [`invoke`] does, one instruction at a time,
    /// noting each function it enters; its stdout.
    fn call(
        &mut self,
        netns: &NetNs,
        program: &Path,
        env: &[(&str, String)],
        stdin: &[u8],
    ) -> Result<Vec<u8>, String> {
        use std::os::unix::process::CommandExt;
        let mut cmd = command(netns, program, &[], env);
        // SAFETY: only ptrace(2), async-signal-safe, runs before exec.
        unsafe {
            cmd.pre_exec(|| ptrace::traceme().map_err(std::io::Error::from));
        }
        let mut child = cmd
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        // Small enough for the pipe: written before the child runs.
        let _ = child.stdin.take().expect("piped").write_all(stdin);
        let pid = Pid::from_raw(child.id() as i32);
        let outcome = self.step(pid);
        if outcome.is_err() {
            // Reaped too: a traced child left a zombie otherwise.
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut stdout = Vec::new();
        let _ = child.stdout.take().expect("piped").read_to_end(&mut stdout);
        if outcome? != WaitStatus::Exited(pid, 0) {
            return Err(format!(
                "traced {} failed: {}",
                program.display(),
                String::from_utf8_lossy(&stdout)
            ));
        }
        Ok(stdout)
    }

    /// Single-steps the stopped tracee `pid` to its end; its wait status.
    fn step(&mut self, pid: Pid) -> Result<WaitStatus, String> {
        let wait = || waitpid(pid, None).map_err(|e| format!("waitpid: {e}"));
        let mut status = wait()?; // stopped at exec
        for _ in 0..MAX_STEPS {
            // A signal other than the step's own trap goes on to the tracee.
            let signal = match status {
                WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Ok(status),
                WaitStatus::Stopped(_, Signal::SIGTRAP) => None,
                WaitStatus::Stopped(_, other) => Some(other),
                other => return Err(format!("tracee: unexpected wait status {other:?}")),
            };
            let regs = ptrace::getregs(pid).map_err(|e| format!("PTRACE_GETREGS: {e}"))?;
            if let Some(i) = self.symbols.find(regs.rip) {
                if !self.seen[i] {
                    self.seen[i] = true;
                    self.order.push(i);
                }
            }
            ptrace::step(pid, signal).map_err(|e| format!("PTRACE_SINGLESTEP: {e}"))?;
            status = wait()?;
        }
        Err(format!("more than {MAX_STEPS} instructions: stopped"))
    }
}

/// `names` as functions.txt keeps them (see the wrapper).
fn normalise<'a>(names: impl Iterator<Item = &'a str>) -> Result<Vec<String>, String> {
    let input: String = names.map(|n| format!("{n}\n")).collect();
    let mut child = Command::new(wrapper())
        .arg("--normalise")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", wrapper().display()))?;
    let mut stdin = child.stdin.take().expect("piped");
    // Written from a thread: the output pipe fills while we write.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(format!("{} --normalise failed", wrapper().display()));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}
