"""Playing the outsider and the faulty peer: each hole of issue 11, with a test."""
