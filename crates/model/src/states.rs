//! How the model declares a state: an enum whose every value has one spelling, the one the API
//! shows, the store keeps and the schema's `CHECK` constraints allow.
//!
//! Every state enum also has an `Unknown` value. It is what a client reads when a newer daemon
//! reports a state this build does not know, so an older CLI or TUI still shows the rest of the
//! answer. Nothing else makes one: [`std::str::FromStr`] refuses the word, the store neither
//! keeps nor reads it, and `ALL` leaves it out.

/// A state enum's words, shared by every one of them (the store keeps a state through this).
pub trait State: Copy + Send + Sync + 'static + std::str::FromStr<Err = String> {
    /// The value's name, as stored and shown.
    fn as_str(self) -> &'static str;
    /// True for the `Unknown` a client reads for a newer daemon's word.
    fn is_unknown(self) -> bool;
}

/// Declares a state enum: `Serialize`/`Deserialize` as its snake-case name (a word it does not
/// know reads as `Unknown`), `ALL`, `as_str`, `FromStr` (naming the allowed values), `Display`
/// and [`State`].
#[macro_export]
macro_rules! state_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
            /// A value this build does not know: what a newer daemon reported. Never stored.
            #[serde(other, rename = "unknown")]
            #[schemars(skip)]
            Unknown,
        }

        impl $name {
            /// Every value, in declaration order (`Unknown` is not one).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value's name, as stored and shown.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Unknown => "unknown",
                }
            }
        }

        impl $crate::states::State for $name {
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
            fn is_unknown(self) -> bool {
                self == $name::Unknown
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(text: &str) -> Result<Self, String> {
                match text {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "`{other}` is not one of {}",
                        [$($text),+].join(", ")
                    )),
                }
            }
        }
    };
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    crate::state_enum! {
        /// A test state.
        pub enum Light {
            Red = "red",
            Green = "green",
        }
    }

    #[test]
    fn a_newer_daemons_word_reads_as_unknown_but_never_parses() {
        let read: Light = serde_json::from_str("\"amber\"").unwrap();
        assert_eq!(read, Light::Unknown);
        assert_eq!(
            serde_json::from_str::<Light>("\"green\"").unwrap(),
            Light::Green
        );
        assert_eq!(
            "amber".parse::<Light>().unwrap_err(),
            "`amber` is not one of red, green"
        );
        assert!("unknown".parse::<Light>().is_err());
        assert_eq!(Light::ALL, &[Light::Red, Light::Green]);
    }
}
