"""What more than one study uses, below all of them: a study imports this package and the harness, never
another study."""
