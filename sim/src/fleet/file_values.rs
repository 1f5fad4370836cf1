//! Values of a fleet traffic file that take more than one form: a load (a number, or a
//! profile over time), a key's users (a number, or every node) and a node (its index, or the
//! last). Each says what it expects when given something else.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::load::Load;

/// Most points a load profile may have.
pub const MAX_PROFILE_POINTS: usize = 1_000;

/// `overload = 2.0`, or `overload = [[0, 0.5], [20_000, 3.0]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadDoc(pub Load);

impl<'de> serde::Deserialize<'de> for LoadDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LoadDoc;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a multiple of the limit (2.0) or a profile of [t_ms, multiple] points \
                     ([[0, 0.5], [20000, 3.0]])",
                )
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<LoadDoc, E> {
                Ok(LoadDoc(Load::Constant(v)))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LoadDoc, E> {
                Ok(LoadDoc(Load::Constant(v as f64)))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LoadDoc, E> {
                Ok(LoadDoc(Load::Constant(v as f64)))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LoadDoc, A::Error> {
                let mut points = Vec::new();
                while let Some(point) = seq.next_element::<(u64, f64)>()? {
                    if points.len() == MAX_PROFILE_POINTS {
                        return Err(de::Error::custom(format!(
                            "a profile of more than {MAX_PROFILE_POINTS} points"
                        )));
                    }
                    points.push(point);
                }
                Ok(LoadDoc(Load::Profile(points)))
            }
        }
        d.deserialize_any(V)
    }
}

/// `users = "all"`, or a count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UsersDoc {
    All,
    Count(u64),
}

impl<'de> serde::Deserialize<'de> for UsersDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = UsersDoc;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of nodes, or \"all\"")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<UsersDoc, E> {
                if v == "all" {
                    Ok(UsersDoc::All)
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(v), &self))
                }
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<UsersDoc, E> {
                Ok(UsersDoc::Count(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<UsersDoc, E> {
                u64::try_from(v)
                    .map(UsersDoc::Count)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// `node = 3`, or `node = "last"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NodeDoc {
    Index(u64),
    Last,
}

impl<'de> serde::Deserialize<'de> for NodeDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NodeDoc;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a node's index (from 0), or \"last\"")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<NodeDoc, E> {
                if v == "last" {
                    Ok(NodeDoc::Last)
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(v), &self))
                }
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<NodeDoc, E> {
                Ok(NodeDoc::Index(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<NodeDoc, E> {
                u64::try_from(v)
                    .map(NodeDoc::Index)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}
