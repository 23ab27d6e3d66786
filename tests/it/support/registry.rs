//! Where the MCP servers from the package registries are installed (npm servers
//! under target/tools/registry, PyPI ones as venvs target/tools/py-NAME), for the
//! tests that run them.

use std::path::PathBuf;

pub(crate) const INSTALL: &str =
    "run scripts/install-test-tools (or scripts/install-registry-servers \
                       and scripts/install-peers-python)";

pub(crate) fn tools_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tools")
}

/// The command that runs one of the npm servers installed under
/// target/tools/registry: `filesystem`, `memory` or `sequential-thinking` (also
/// accepted as `server-memory` or `@modelcontextprotocol/server-memory`), on the Node
/// 22 of target/tools or else the machine's `node`. Add the server's own arguments
/// (server-filesystem's allowed directories). Panics, saying how to install it, when
/// it is not installed.
pub(crate) fn registry_server(name: &str) -> Vec<String> {
    let short = name.trim_start_matches("@modelcontextprotocol/");
    let short = short.trim_start_matches("server-");
    let entry = tools_dir()
        .join("registry/node_modules/@modelcontextprotocol")
        .join(format!("server-{short}"))
        .join("dist/index.js");
    assert!(
        entry.is_file(),
        "@modelcontextprotocol/server-{short} is not installed (no {}): {INSTALL}",
        entry.display()
    );
    vec![crate::support::node::node(), entry.display().to_string()]
}

/// The console script `bin` of the PyPI server installed in target/tools/py-VENV.
/// Panics, saying how to install it, when it is not installed.
pub(crate) fn py_server(venv: &str, bin: &str) -> String {
    let dir = tools_dir().join(format!("py-{venv}"));
    let exe = dir.join("bin").join(bin);
    assert!(
        exe.is_file() && dir.join(".tasklift-installed-requirements.txt").is_file(),
        "{bin} is not installed (no {}): {INSTALL}",
        exe.display()
    );
    exe.display().to_string()
}
