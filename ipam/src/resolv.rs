//! `resolvConf`: the DNS settings host-local reports, read from a
//! resolv.conf-style file as the reference reads it: `nameserver` (one per
//! line), `domain` (the last one wins), `search` and `options` (every word,
//! appended); comments (`#`, `;`), blank lines, lines with fewer than two
//! words and other keywords are skipped.

use crate::error::IpamError;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use plexus_cni::result::Dns;

/// A resolv.conf is a few lines; anything this large is not one.
const MAX_RESOLV_CONF: u64 = 1 << 20;

pub(crate) fn parse(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 2 {
            continue;
        }
        let rest = words[1..].iter().map(|w| w.to_string());
        match words[0] {
            "nameserver" => dns.nameservers.push(words[1].to_string()),
            "domain" => dns.domain = Some(words[1].to_string()),
            "search" => dns.search.extend(rest),
            "options" => dns.options.extend(rest),
            _ => {}
        }
    }
    dns
}

/// Read and parse `path`; errors name `field` (`ipam.resolvConf`).
pub(crate) fn read(path: &Path, field: &str) -> Result<Dns, IpamError> {
    let fail = |e: &dyn std::fmt::Display| {
        IpamError::io(field, format!("cannot read {}: {e}", path.display()))
    };
    let file = File::open(path).map_err(|e| fail(&e))?;
    let mut bytes = Vec::new();
    file.take(MAX_RESOLV_CONF + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(&e))?;
    if bytes.len() as u64 > MAX_RESOLV_CONF {
        return Err(fail(&format!("larger than {MAX_RESOLV_CONF} bytes")));
    }
    Ok(parse(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_the_reference() {
        let dns = parse(
            "# generated\n\
             nameserver 10.0.0.10\n\
             ; old style comment\n\
             nameserver   fd00::10  \n\
             domain first.example\n\
             domain example.com\n\
             search a.example b.example\n\
             search c.example\n\
             options ndots:5 timeout:2\n\
             options\n\
             sortlist 10.0.0.0/8\n\
             \n",
        );
        assert_eq!(dns.nameservers, ["10.0.0.10", "fd00::10"]);
        assert_eq!(dns.domain.as_deref(), Some("example.com"));
        assert_eq!(dns.search, ["a.example", "b.example", "c.example"]);
        assert_eq!(dns.options, ["ndots:5", "timeout:2"]);
        assert!(parse("").is_empty());
    }

    #[test]
    fn unreadable_file_names_the_field() {
        let e = read(Path::new("/nonexistent/resolv.conf"), "ipam.resolvConf").unwrap_err();
        assert!(
            matches!(&e, IpamError::Io { what, reason }
                if what == "ipam.resolvConf"
                    && reason.starts_with("cannot read /nonexistent/resolv.conf: ")),
            "{e:?}"
        );
    }
}
