"""Writes tests/data/openai_diffusion/<name>.pt: the reference model's state-dict layout (names, shapes in
order), its flags, and for weights drawn in that order from torch.Generator seed 0 (randn * 0.05), inputs x_t,
t and the reference's pred_xstart. Needs a checkout of the reference repository (not installed here):
    python make_fixture.py PATH/improved-diffusion improved_diffusion improved_cifar_like 'FLAGS_JSON' OUT_DIR
    python make_fixture.py PATH/guided-diffusion guided_diffusion guided_imagenet_like 'FLAGS_JSON' OUT_DIR
with the flags stored in each fixture (its "flags")."""

import json
import sys

import torch

sys.path.insert(0, sys.argv[1])
pkg = sys.argv[2]
su = __import__(pkg + ".script_util", fromlist=["x"])
name, flags = sys.argv[3], json.loads(sys.argv[4])
d = su.model_and_diffusion_defaults()
d.update(flags)
model, diffusion = su.create_model_and_diffusion(**{k: d[k] for k in su.model_and_diffusion_defaults()})
g = torch.Generator().manual_seed(0)
layout = [(k, list(v.shape)) for k, v in model.state_dict().items()]
model.load_state_dict({k: torch.randn(shape, generator=g) * 0.05 for k, shape in layout})
model.eval()
out = sys.argv[5]
state = model.state_dict()
size = flags["image_size"]
x_t = torch.randn(2, 3, size, size, generator=g) * 0.8
t = torch.tensor([100, diffusion.num_timesteps // 2])
with torch.no_grad():
    x0 = diffusion.p_sample(model, x_t, t, clip_denoised=True)["pred_xstart"]
    raw = diffusion.p_sample(model, x_t, t, clip_denoised=False)["pred_xstart"]
torch.save(
    {
        "layout": json.dumps(layout),
        "flags": json.dumps(flags),
        "x_t": x_t,
        "t": t,
        "pred_xstart": x0,
        "pred_xstart_unclipped": raw,
    },
    f"{out}/{name}.pt",
)
print(
    name, sum(v.numel() for v in state.values()), "params", "clipped share", (x0 != raw).float().mean().item()
)
