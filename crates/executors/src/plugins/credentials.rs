//! Per-call credentials: who a call's processes act as, decided by the daemon.
//!
//! Every `execute` call made for an automation (a hook, a cron, a webhook handler, a graph node)
//! gets a fresh token, valid while the call runs, that its processes find in
//! `CANOPY_CALL_TOKEN`. The `canopy` CLI prefers it to the daemon's token, and the API
//! attributes a request made with it to the call's actor and dispatch depth, whatever its
//! headers say. A process cannot make its requests look like a user's or another automation's
//! by changing its environment: the token is the attribution. (A process that reads the
//! daemon's own token from the data dir acts as the user at depth 0; the per-hook firing
//! breaker is the backstop for such loops.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use canopy_model::call_env::CALL_TOKEN_PREFIX as PREFIX;
use canopy_model::events::Cause;

/// The live call tokens (cheap to clone).
#[derive(Debug, Default, Clone)]
pub struct CallCredentials {
    live: Arc<Mutex<HashMap<String, Cause>>>,
}

/// What a presented token is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presented {
    /// A live call's token: its requests act as this.
    Live(Cause),
    /// A call token whose call has ended.
    Ended,
    /// Not a call token.
    Other,
}

impl CallCredentials {
    /// A token for one call acting as `cause`, live until the returned guard is dropped.
    pub fn mint(&self, cause: Cause) -> Credential {
        let mut bytes = [0u8; 24];
        // The OS's randomness failing leaves no secure token to make; fall back to the
        // process-unique id, which is still unguessable by a process that has not seen it.
        let token = match getrandom::fill(&mut bytes) {
            Ok(()) => format!("{PREFIX}{}", hex::encode(bytes)),
            Err(_) => format!("{PREFIX}{}", canopy_store::new_id()),
        };
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.clone(), cause);
        Credential {
            token,
            owner: self.clone(),
        }
    }

    /// What `token` is.
    pub fn lookup(&self, token: &str) -> Presented {
        if !token.starts_with(PREFIX) {
            return Presented::Other;
        }
        match self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
        {
            Some(cause) => Presented::Live(cause.clone()),
            None => Presented::Ended,
        }
    }

    /// How many calls hold a token now.
    pub fn live(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// One call's token; it stops being accepted when this is dropped.
#[derive(Debug)]
pub struct Credential {
    token: String,
    owner: CallCredentials,
}

impl Credential {
    /// The token, for the call's processes only: never logged or recorded.
    pub fn token(&self) -> &str {
        &self.token
    }
}

impl Drop for Credential {
    fn drop(&mut self) {
        self.owner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_model::events::Actor;

    #[test]
    fn a_token_acts_as_its_call_while_the_call_runs_and_never_after() {
        let credentials = CallCredentials::default();
        let cause = Cause {
            actor: Actor::Hook("h".to_string()),
            depth: 2,
        };
        let credential = credentials.mint(cause.clone());
        let token = credential.token().to_string();
        assert!(token.starts_with(PREFIX) && token.len() > PREFIX.len() + 40);
        assert_eq!(credentials.lookup(&token), Presented::Live(cause));
        assert_ne!(credentials.mint(Cause::user()).token(), token);
        drop(credential);
        assert_eq!(credentials.lookup(&token), Presented::Ended);
        assert_eq!(credentials.lookup("daemon-token"), Presented::Other);
        assert_eq!(credentials.live(), 0);
    }
}
