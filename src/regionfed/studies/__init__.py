"""The paper's studies (issue 10): registry of variant grids, the sweep runner, and the
paper's own numbers (paper_claims.yaml) to set our results beside."""
