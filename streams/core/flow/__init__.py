"""The record's pass: read a node's tables, call the decisions, write back what changed."""
