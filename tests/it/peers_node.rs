//! Foreign MCP peers (peers_node): see the module's tests.
