"""Models from the Hub (PLACEHOLDER until hub-core lands)."""
