"""The Lohe flow dz/dt = (I - z z^T) h on the sphere, integrated numerically.

Checks the closed-form equilibrium z* = h/||h|| used by the attention layer and measures the two
failure modes of a finite-time (physical or iterative) implementation as a function of d_osc.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def lohe_step(z: Tensor, h: Tensor, dt: float) -> Tensor:
    """One exponential-map (geodesic) Euler step: stays on the sphere exactly, fixed point z*."""
    v = h - (z * h).sum(-1, keepdim=True) * z  # tangent projection (I - z z^T) h
    speed = v.norm(dim=-1, keepdim=True)
    direction = v / speed.clamp_min(1e-300)
    z = torch.cos(speed * dt) * z + torch.sin(speed * dt) * direction
    return z / z.norm(dim=-1, keepdim=True)  # remove rounding drift


def integrate(z0: Tensor, h: Tensor, *, dt: float = 1e-2, t_max: float = 50.0, tol: float = 1e-4):
    """Integrate from z0 [N,d] under fields h [N,d]; return (z at t_max, time to reach ||z - z*|| < tol).

    The time is inf for trajectories that never get within tol (degenerate h, or starting at -z*).
    """
    z_star = h / h.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    z, t_conv = z0.clone(), torch.full(z0.shape[:1], float("inf"), dtype=z0.dtype)
    for step in range(1, int(round(t_max / dt)) + 1):
        z = lohe_step(z, h, dt)
        done = ((z - z_star).norm(dim=-1) < tol) & t_conv.isinf()
        t_conv[done] = step * dt
    return z, t_conv


def random_fields(n: int, d_osc: int, tokens: int = 49, *, generator: torch.Generator) -> Tensor:
    """h = sum_j w_j r_j as in the attention layer: random unit anchors, positive weights with sum 1."""
    r = torch.randn(n, tokens, d_osc, generator=generator, dtype=torch.float64)
    r = r / r.norm(dim=-1, keepdim=True)
    w = torch.rand(n, tokens, 1, generator=generator, dtype=torch.float64)
    return (w / w.sum(1, keepdim=True) * r).sum(1) * tokens**0.5  # scaled so E||h||^2 ~ 1


def random_unit(n: int, d: int, *, generator: torch.Generator) -> Tensor:
    z = torch.randn(n, d, generator=generator, dtype=torch.float64)
    return z / z.norm(dim=-1, keepdim=True)


@dataclass(frozen=True)
class ConvergenceReport:
    d_osc: int
    max_rel_error: float  # closed form vs integrated equilibrium (converged trajectories)
    mean_time: float
    p95_time: float
    p_small_h: float  # P(||h|| < delta * E||h||): direction nearly undefined
    p_near_antipode: float  # P(angle(z0, -z*) < delta): slow escape from the unstable equilibrium


def convergence_study(d_osc: int, n: int = 2000, *, delta: float = 0.1, seed: int = 0,
                      dt: float = 1e-2, t_max: float = 50.0) -> ConvergenceReport:
    """Monte Carlo over random fields and random starts on S^(d_osc - 1)."""
    g = torch.Generator().manual_seed(seed)
    h = random_fields(n, d_osc, generator=g)
    z0 = random_unit(n, d_osc, generator=g)
    z, t = integrate(z0, h, dt=dt, t_max=t_max)
    z_star = h / h.norm(dim=-1, keepdim=True)
    ok = t.isfinite()
    rel = ((z - z_star).norm(dim=-1) / z_star.norm(dim=-1))[ok]
    hn = h.norm(dim=-1)
    antipode_angle = torch.arccos((-z_star * z0).sum(-1).clamp(-1, 1))
    t_capped = torch.where(ok, t, torch.full_like(t, t_max))  # unconverged count as t_max
    return ConvergenceReport(
        d_osc=d_osc,
        max_rel_error=rel.max().item() if ok.any() else float("inf"),
        mean_time=t_capped.mean().item(),
        p95_time=t_capped.quantile(0.95).item(),
        p_small_h=(hn < delta * hn.mean()).double().mean().item(),
        p_near_antipode=(antipode_angle < delta).double().mean().item(),
    )
