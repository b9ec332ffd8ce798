"""User-level personalization (paper Eq. 5 and 7), after training, on the device.

For every user u of region r, starting from the regional model θ_region^r:

* δ_u = θ_u^ft − θ_region^r, with θ_u^ft = θ_region^r fine-tuned on the user's own training
  data for ``epochs`` local epochs;
* c_u = ‖∇L_u(θ_region^r) − g̃_r‖₂ (user–region gradient conflict, g̃_r the region's last DP
  aggregate);
* α_u = α_min + (1 − α_min)·sigmoid((c_u − μ_u)/τ_u) (Eq. 7), μ_u = median of c_u over the
  region's users (each user shares only the scalar c_u), τ_u = 1 or ``auto`` (the MAD);
* θ_u = θ_region^r + α_u·δ_u (Eq. 5). θ_u never leaves the device.

Under DP (``private``) the users share nothing: the median of the users' un-noised c_u
would let one user's data shape another's α_u outside ε. μ_u is then ‖g̃_r‖₂ — the norm of
the region's released (noisy) update, a DP output — and τ = ``auto`` becomes τ_u = μ_u, so
α_u depends only on the user's own data and on released values.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from regionfed.algorithms.base import ClientContext
from regionfed.algorithms.regionfed.conflict import ConflictCalibration


def personalize_region(users: Mapping[str, ClientContext], regional_params: torch.Tensor,
                       regional_update: torch.Tensor | None, *, alpha_min: float = 0.5,
                       tau: float | str = 1.0, epochs: int = 1, private: bool = False
                       ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """θ_u for every user of one region, and the α_u used (Eq. 5, 7); ``private``: μ_u from
    the released g̃_r instead of the users' scalars (module docstring)."""
    deltas, conflict = {}, {}
    reference = torch.zeros_like(regional_params) if regional_update is None \
        else regional_update
    for uid, user in users.items():
        tuned, _ = user.train(regional_params, epochs=epochs)
        deltas[uid] = tuned - regional_params
        conflict[uid] = float(torch.linalg.vector_norm(user.gradient(regional_params)
                                                       - reference))
    calibration = ConflictCalibration(tau)
    if private:
        mu = float(torch.linalg.vector_norm(reference))
        calibration.mu = mu
        calibration.tau = max(mu, 1e-12) if tau == "auto" else float(tau)
    else:
        calibration.calibrate(conflict)  # μ_u: median over this region's users
    alpha = calibration.alphas(conflict, alpha_min)
    return {uid: regional_params + alpha[uid] * deltas[uid] for uid in users}, alpha
