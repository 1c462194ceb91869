//! The Lua scripts (hashed once per process, sent with EVALSHA) and what their replies mean.

use redis::{Script, Value};

use crate::lease::Renewal;

/// A Lua script: its SHA for EVALSHA, and its source for SCRIPT LOAD after NOSCRIPT.
pub(super) struct Lua {
    pub(super) script: Script,
    pub(super) code: &'static str,
}

impl Lua {
    pub(super) fn new(code: &'static str) -> Self {
        Self {
            script: Script::new(code),
            code,
        }
    }
}

/// The scripts, hashed once per process and sent with EVALSHA.
pub(super) struct Scripts {
    pub(super) acquire: Lua,
    pub(super) release: Lua,
    pub(super) extend: Lua,
    pub(super) status: Lua,
    pub(super) force_unlock: Lua,
    pub(super) raise_fence: Lua,
}

pub(super) fn scripts() -> &'static Scripts {
    static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        // The rules the scripts share (holds, tokens, handover, key checks) are written once,
        // in lib.lua.
        acquire: Lua::new(concat!(
            include_str!("lib.lua"),
            include_str!("acquire.lua")
        )),
        release: Lua::new(concat!(
            include_str!("lib.lua"),
            include_str!("release.lua")
        )),
        extend: Lua::new(concat!(include_str!("lib.lua"), include_str!("extend.lua"))),
        status: Lua::new(include_str!("status.lua")),
        force_unlock: Lua::new(include_str!("force_unlock.lua")),
        raise_fence: Lua::new(concat!(
            include_str!("lib.lua"),
            include_str!("raise_fence.lua")
        )),
    })
}

/// What an extend script's reply (the remaining lease, or -1) says.
pub(super) fn renewal(ttl: i64) -> Renewal {
    if ttl >= 0 {
        Renewal::Renewed
    } else {
        Renewal::NotHeld
    }
}

/// A holder's hold count: the number of hold ids in its field.
pub(super) fn hold_count(holds: &Value) -> u64 {
    match holds {
        Value::BulkString(ids) => String::from_utf8_lossy(ids).split_whitespace().count() as u64,
        _ => 0,
    }
}

/// `EVALSHA sha numkeys`, to be followed by the keys and arguments.
pub(super) fn evalsha(script: &Lua, keys: usize) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.script.get_hash()).arg(keys);
    cmd
}
