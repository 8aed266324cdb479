//! The MCP server end to end, driven by the official Python MCP SDK.
