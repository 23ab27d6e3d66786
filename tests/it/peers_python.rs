//! Foreign MCP peers (peers_python): see the module's tests.
