//! Ethernet MAC addresses.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// A 48-bit Ethernet address. Displays as lowercase `aa:bb:cc:dd:ee:ff`, the
/// form CNI results and `ip -j` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The bytes of the address.
    pub fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// Multicast (group) bit set: such an address can't be a link's address.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// Locally administered bit set (the kind plexus generates).
    pub fn is_local(&self) -> bool {
        self.0[0] & 2 == 2
    }

    pub(crate) fn from_slice(b: &[u8]) -> Option<Self> {
        <[u8; 6]>::try_from(b).ok().map(MacAddr)
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl FromStr for MacAddr {
    type Err = Error;

    /// Accepts six hex pairs separated by `:` or `-` (either case).
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::invalid("MAC address", s, reason);
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in out.iter_mut() {
            let p = parts.next().ok_or_else(|| bad("expected 6 octets"))?;
            if p.len() != 2 {
                return Err(bad("each octet must be 2 hex digits"));
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| bad("not hexadecimal"))?;
        }
        if parts.next().is_some() {
            return Err(bad("expected 6 octets"));
        }
        Ok(MacAddr(out))
    }
}

/// As text (`aa:bb:cc:dd:ee:ff`), the form records and results keep.
impl serde::Serialize for MacAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for MacAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        let m: MacAddr = "0A:58:0a:F4:00:01".parse().unwrap();
        assert_eq!(m.0, [0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x01]);
        assert_eq!(m.to_string(), "0a:58:0a:f4:00:01");
        assert!(m.is_local());
        assert!(!m.is_multicast());
        assert_eq!("0a-58-0a-f4-00-01".parse::<MacAddr>().unwrap(), m);
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(text, r#""0a:58:0a:f4:00:01""#);
        assert_eq!(serde_json::from_str::<MacAddr>(&text).unwrap(), m);
        assert!(serde_json::from_str::<MacAddr>(r#""0a:58""#).is_err());
    }

    #[test]
    fn parse_rejects_malformed() {
        for s in [
            "",
            "0a:58:0a:f4:00",
            "0a:58:0a:f4:00:01:02",
            "0a:58:0a:f4:00:1",
            "zz:58:0a:f4:00:01",
        ] {
            assert!(s.parse::<MacAddr>().is_err(), "{s}");
        }
    }
}
