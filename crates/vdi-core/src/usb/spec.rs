//! How a device is named on the command line and to `usbredirect --device`: `vid:pid` in hex
//! or `bus-address` in decimal.

/// How a device is named on the command line, as `usbredirect --device` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// `vid:pid`, hexadecimal.
    Id {
        /// Vendor id.
        vendor: u16,
        /// Product id.
        product: u16,
    },
    /// `bus-address`, decimal.
    BusAddress {
        /// Bus number.
        bus: u8,
        /// Address on the bus.
        address: u8,
    },
}

impl DeviceSpec {
    /// Parses `1050:0407` or `3-7`.
    ///
    /// Errors: [`crate::Error::Invalid`] with the two accepted forms.
    pub fn parse(text: &str) -> crate::Result<Self> {
        let bad = || {
            crate::Error::invalid(
                format!(
                    "\"{}\" is not a USB device: write vendor:product in hex (1050:0407) or bus-address (3-7)",
                    text.escape_debug()
                ),
                "`corral-vdi usb list` shows both forms for every device",
            )
        };
        if let Some((v, p)) = text.split_once(':') {
            let hex = |s: &str| {
                (s.len() == 4)
                    .then(|| u16::from_str_radix(s, 16).ok())
                    .flatten()
            };
            return match (hex(v), hex(p)) {
                (Some(vendor), Some(product)) => Ok(DeviceSpec::Id { vendor, product }),
                _ => Err(bad()),
            };
        }
        if let Some((b, a)) = text.split_once('-') {
            return match (b.parse::<u8>(), a.parse::<u8>()) {
                (Ok(bus), Ok(address)) if bus > 0 && address > 0 => {
                    Ok(DeviceSpec::BusAddress { bus, address })
                }
                _ => Err(bad()),
            };
        }
        Err(bad())
    }

    /// The argument for `usbredirect --device`.
    pub fn argument(&self) -> String {
        match self {
            DeviceSpec::Id { vendor, product } => format!("{vendor:04x}:{product:04x}"),
            DeviceSpec::BusAddress { bus, address } => format!("{bus}-{address}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_both_forms() {
        assert_eq!(
            DeviceSpec::parse("1050:0407").unwrap(),
            DeviceSpec::Id {
                vendor: 0x1050,
                product: 0x0407
            }
        );
        assert_eq!(
            DeviceSpec::parse("3-7").unwrap(),
            DeviceSpec::BusAddress { bus: 3, address: 7 }
        );
        for bad in [
            "",
            "1050",
            "1050:",
            "zz:0407",
            "10500:0407",
            "0-1",
            "a-b",
            "1050:0407\n",
        ] {
            assert!(DeviceSpec::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            DeviceSpec::parse("1050:0407").unwrap().argument(),
            "1050:0407"
        );
        assert_eq!(DeviceSpec::parse("3-7").unwrap().argument(), "3-7");
    }
}
