//! Every state a stored thing can be in: the model's state enum (see
//! [`canopy_model::state_enum`]) with the SQL conversions the store keeps it by.

/// Declares a state enum the store keeps: [`canopy_model::state_enum`] plus `ToSql`/`FromSql`
/// as its text.
macro_rules! state_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)? }
    ) => {
        canopy_model::state_enum! {
            $(#[$meta])*
            pub enum $name { $( $(#[$vmeta])* $variant = $text ),+ }
        }

        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                let text = value.as_str()?;
                text.parse()
                    .map_err(|err: String| rusqlite::types::FromSqlError::Other(err.into()))
            }
        }
    };
}

pub(crate) use state_enum;
