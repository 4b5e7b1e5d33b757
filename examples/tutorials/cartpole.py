"""gymnasium's ``CartPole-v1`` in numpy, for the ported RL tutorials (gymnasium is not installed).

``gym.make("CartPole-v1")`` returns a :class:`CartPole`: the dynamics, limits,
rewards and ``reset``/``step`` API of gymnasium's environment (Barto, Sutton &
Anderson), so a tutorial's ``import gymnasium as gym`` becomes
``from cartpole import gym`` and nothing else changes.

Example:
    >>> env = gym.make("CartPole-v1")
    >>> state, _ = env.reset(seed=0)
    >>> state.shape, state.dtype.name
    ((4,), 'float32')
    >>> state, reward, terminated, truncated, _ = env.step(1)
    >>> reward, terminated, truncated
    (1.0, False, False)
"""

from types import SimpleNamespace

import numpy as np


class CartPole:
    """CartPole-v1 (Barto, Sutton & Anderson): gymnasium's dynamics, limits and API."""

    spec = SimpleNamespace(reward_threshold=475.0, max_episode_steps=500)

    def __init__(self):
        self.rng, self.state, self.steps = np.random.default_rng(), None, 0

    def reset(self, seed=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.state, self.steps = self.rng.uniform(-0.05, 0.05, size=4), 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos**2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * x_acc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc
        self.state, self.steps = np.array([x, x_dot, theta, theta_dot]), self.steps + 1
        terminated = bool(abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360)
        truncated = self.steps >= self.spec.max_episode_steps
        return self.state.astype(np.float32), 1.0, terminated, truncated, {}


gym = SimpleNamespace(make=lambda name: CartPole())
