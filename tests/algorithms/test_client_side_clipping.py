"""``dp.clip_on_client``: every vector a client releases is clipped before it leaves (what
secure aggregation needs), and because the server's clip is then a no-op, the run is the
server-clipped run."""

import pytest
import torch

from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.regionfed import RegionFed, RegionFedConfig
from regionfed.algorithms.scaffold import CONTROL_DELTA, Scaffold
from regionfed.config import TrainingConfig
from regionfed.privacy.mechanism import DPConfig
from regionfed.runtime.local_training import OptimizerConfig
from regionfed.runtime.simulator import Simulator

CLIP = 0.05  # well below the updates' norms, so clipping binds
# SGD, not the default AdamW: the two paths clip the same update in two places, which may
# differ in the last bit (‖Δ‖ computed twice); AdamW's g/√v turns such differences in
# near-zero gradients into lr-sized steps in round 2, SGD keeps them at float noise
TRAINING = TrainingConfig(rounds=2, local_epochs=1, batch_size=32, eval_every=2,
                          optimizer=OptimizerConfig(name="sgd", lr=0.5))


def dp(on_client: bool) -> DPConfig:
    return DPConfig(mode="user", sigma=0.0, clip=CLIP, clip_on_client=on_client)


class Recording:
    """Wraps a strategy's client step to keep every released vector."""

    def __init__(self, strategy):
        self.released = []
        handle = strategy.handle

        def recorded(instruction, client):
            result = handle(instruction, client)
            self.released.append(result.update)
            if CONTROL_DELTA in result.metrics:
                self.released.append(result.metrics[CONTROL_DELTA])
            return result

        strategy.handle = recorded


@pytest.mark.parametrize("make", [
    lambda d: FedAvg(dp=d),
    lambda d: Scaffold(dp=d),
    lambda d: RegionFed("grad", RegionFedConfig(rho_search=False), dp=d),
], ids=["fedavg", "scaffold", "regionfed-grad"])
def test_clipping_on_the_client_gives_the_server_clipped_run(tiny_federation, tiny_task,
                                                             make):
    server_side, client_side = make(dp(False)), make(dp(True))
    seen_server, seen_client = Recording(server_side), Recording(client_side)
    a = Simulator(tiny_federation, tiny_task, TRAINING, seed=0).run(server_side)
    b = Simulator(tiny_federation, tiny_task, TRAINING, seed=0).run(client_side)
    # float noise of a 2-round run: every client moves θ by ≤ CLIP per round, so relative
    # rounding differences (~1e-7) give ≪ 1e-5; a clip in the wrong place moves it by ~CLIP
    assert torch.allclose(a.final_params, b.final_params, atol=1e-5)
    norms = [v.norm().item() for v in seen_client.released if v is not None]
    assert norms and max(norms) <= CLIP * (1 + 1e-5)
    # without it, clients send their raw updates (the clip would bind on the server)
    assert max(v.norm().item() for v in seen_server.released if v is not None) > 2 * CLIP


def test_clip_on_client_is_off_by_default_and_validated():
    from regionfed.config import build_config
    from regionfed.errors import ConfigError

    assert build_config({}).dp.clip_on_client is False
    assert build_config({"dp": {"mode": "user", "clip_on_client": True}}).dp.clip_on_client
    with pytest.raises(ConfigError, match="dp.clip_on_client"):
        build_config({"dp": {"clip_on_client": "sometimes"}})
