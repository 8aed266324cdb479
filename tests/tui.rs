//! The terminal UI end to end, in a real terminal (tmux).
