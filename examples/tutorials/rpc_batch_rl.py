"""PyTorch's RPC batch reinforcement learning example (``rpc/batch/reinforce.py``), ported.

Rank 0 is the agent holding the policy; every other rank is an observer with its
own CartPole. Each step, every observer sends its state to the agent
(``rpc_sync``); with batching, ``select_action_batch`` is an
``@rpc.functions.async_execution`` function that returns a Future, and the agent
runs the policy once when the states of all observers are in, answering every
observer from one ``torch.futures.Future``; without batching, each call runs the
policy on its own state. After an episode the agent trains the policy with
REINFORCE. ``main`` times both (two spawns) for each world size.

The same file runs on tensorplay_jax (the default) and on torch:
``TUTORIAL_BACKEND=torch`` imports torch instead. The backend block below is the
one place the two differ; every other line that differs from the upstream
program is marked ``# port:`` with its reason: gymnasium is not installed, so
``cartpole.py`` (gymnasium's ``CartPole-v1`` in numpy) stands in for it;
``.cuda()`` is the CPU (where it copied, ``clone()``); ``MASTER_PORT`` may be set by the caller;
``--num-steps`` shortens the episodes (a test runs them small).

Run (world size 2: the agent and one observer, batched and not)::

    python examples/tutorials/rpc_batch_rl.py
    TUTORIAL_BACKEND=torch python examples/tutorials/rpc_batch_rl.py
"""

import argparse
import os
import threading
import time
import warnings

from cartpole import gym  # port: gymnasium is not installed (its CartPole-v1 in numpy)

# Suppress deprecated ProcessGroup warning
warnings.filterwarnings("ignore", message="You are using a Backend.*ProcessGroup")

# --------- port: the backend (TUTORIAL_BACKEND=torch or tensorplay_jax) ---------
BACKEND = os.environ.get("TUTORIAL_BACKEND", "tensorplay_jax")
if BACKEND == "torch":
    import torch
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim
    from torch.distributed.rpc import RRef, remote
    from torch.distributions import Categorical
elif BACKEND == "tensorplay_jax":
    import tensorplay_jax as torch
    import tensorplay_jax.distributed.rpc as rpc
    import tensorplay_jax.nn as nn
    import tensorplay_jax.nn.functional as F
    import tensorplay_jax.optim as optim
    import tensorplay_jax.rpc as mp  # spawn, as torch.multiprocessing's
    from tensorplay_jax.distributed.rpc import RRef, remote
    from tensorplay_jax.distributions import Categorical
else:
    raise SystemExit(f"TUTORIAL_BACKEND={BACKEND!r}: choose torch or tensorplay_jax")
# --------- end of the backend block ---------

# demonstrating using rpc.functions.async_execution to speed up training

NUM_STEPS = 500
AGENT_NAME = "agent"
OBSERVER_NAME = "observer{}"

parser = argparse.ArgumentParser(description="PyTorch RPC Batch RL example")
parser.add_argument(
    "--gamma", type=float, default=1.0, metavar="G", help="discount factor (default: 1.0)"
)
parser.add_argument("--seed", type=int, default=543, metavar="N", help="random seed (default: 543)")
parser.add_argument(
    "--num-episode", type=int, default=10, metavar="E", help="number of episodes (default: 10)"
)
parser.add_argument(
    "--max-world-size", type=int, default=3, metavar="W",
    help="maximum world size to test (default: 3)",
)  # fmt: skip
parser.add_argument(
    "--num-steps", type=int, default=NUM_STEPS, help="port: steps per episode (default: 500)"
)
args = parser.parse_args()
NUM_STEPS = args.num_steps  # port: a test runs shorter episodes

torch.manual_seed(args.seed)


class Policy(nn.Module):
    r"""
    Borrowing the ``Policy`` class from the Reinforcement Learning example.
    Copying the code to make these two examples independent.
    See https://github.com/pytorch/examples/tree/main/reinforcement_learning
    """

    def __init__(self, batch=True):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)
        self.dim = 2 if batch else 1

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=self.dim)


class Observer:
    r"""
    An observer has exclusive access to its own environment. Each observer
    captures the state from its environment, and send the state to the agent to
    select an action. Then, the observer applies the action to its environment
    and reports the reward to the agent.
    """

    def __init__(self, batch=True):
        self.id = rpc.get_worker_info().id - 1
        self.env = gym.make("CartPole-v1")
        self.env.reset(seed=args.seed)
        self.select_action = Agent.select_action_batch if batch else Agent.select_action

    def run_episode(self, agent_rref, n_steps):
        r"""
        Run one episode of n_steps.

        Args:
            agent_rref (RRef): an RRef referencing the agent object.
            n_steps (int): number of steps in this episode
        """
        state, _ = self.env.reset()
        ep_reward = NUM_STEPS
        rewards = torch.zeros(n_steps)
        start_step = 0
        for step in range(n_steps):
            state = torch.from_numpy(state).float().unsqueeze(0)
            # send the state to the agent to get an action
            action = rpc.rpc_sync(
                agent_rref.owner(), self.select_action, args=(agent_rref, self.id, state)
            )

            # apply the action to the environment, and get the reward
            state, reward, terminated, truncated, _ = self.env.step(action)
            rewards[step] = reward

            if terminated or truncated or step + 1 >= n_steps:
                curr_rewards = rewards[start_step : (step + 1)]
                R = 0
                for i in range(curr_rewards.numel() - 1, -1, -1):
                    R = curr_rewards[i] + args.gamma * R
                    curr_rewards[i] = R
                state, _ = self.env.reset()
                if start_step == 0:
                    ep_reward = min(ep_reward, step - start_step + 1)
                start_step = step + 1

        return [rewards, ep_reward]


class Agent:
    def __init__(self, world_size, batch=True):
        self.ob_rrefs = []
        self.agent_rref = RRef(self)
        self.rewards = {}
        self.policy = Policy(batch)  # port: .cuda(): the CPU
        self.optimizer = optim.Adam(self.policy.parameters(), lr=1e-2)
        self.running_reward = 0

        for ob_rank in range(1, world_size):
            ob_info = rpc.get_worker_info(OBSERVER_NAME.format(ob_rank))
            self.ob_rrefs.append(remote(ob_info, Observer, args=(batch,)))
            self.rewards[ob_info.id] = []

        self.states = torch.zeros(len(self.ob_rrefs), 1, 4)
        self.batch = batch
        # With batching, saved_log_probs contains a list of tensors, where each
        # tensor contains probs from all observers in one step.
        # Without batching, saved_log_probs is a dictionary where the key is the
        # observer id and the value is a list of probs for that observer.
        self.saved_log_probs = [] if self.batch else {k: [] for k in range(len(self.ob_rrefs))}
        self.future_actions = torch.futures.Future()
        self.lock = threading.Lock()
        self.pending_states = len(self.ob_rrefs)

    @staticmethod
    @rpc.functions.async_execution
    def select_action_batch(agent_rref, ob_id, state):
        r"""
        Batching select_action: In each step, the agent waits for states from
        all observers, and process them together. This helps to reduce the
        number of CUDA kernels launched and hence speed up amortized inference
        speed.
        """
        self = agent_rref.local_value()
        self.states[ob_id].copy_(state)
        future_action = self.future_actions.then(
            lambda future_actions: future_actions.wait()[ob_id].item()
        )

        with self.lock:
            self.pending_states -= 1
            if self.pending_states == 0:
                self.pending_states = len(self.ob_rrefs)
                # port: .cuda() copies the states to the GPU, so the next step's copy_ into
                # self.states leaves the saved input alone; on the CPU the copy is clone()
                probs = self.policy(self.states.clone())
                m = Categorical(probs)
                actions = m.sample()
                self.saved_log_probs.append(m.log_prob(actions).t()[0])
                future_actions = self.future_actions
                self.future_actions = torch.futures.Future()
                future_actions.set_result(actions.cpu())
        return future_action

    @staticmethod
    def select_action(agent_rref, ob_id, state):
        r"""
        Non-batching select_action, return the action right away.
        """
        self = agent_rref.local_value()
        probs = self.policy(state)  # port: .cuda(): the CPU
        m = Categorical(probs)
        action = m.sample()
        self.saved_log_probs[ob_id].append(m.log_prob(action))
        return action.item()

    def run_episode(self, n_steps=0):
        r"""
        Run one episode. The agent will tell each oberser to run one episode
        with n_steps. Then it collects all actions and rewards, and use those to
        train the policy.
        """
        futs = []
        for ob_rref in self.ob_rrefs:
            # make async RPC to kick off an episode on all observers
            futs.append(ob_rref.rpc_async().run_episode(self.agent_rref, n_steps))

        # wait until all obervers have finished this episode
        rets = torch.futures.wait_all(futs)
        rewards = torch.stack([ret[0] for ret in rets]).t()  # port: .cuda(): the CPU
        ep_rewards = sum([ret[1] for ret in rets]) / len(rets)

        if self.batch:
            probs = torch.stack(self.saved_log_probs)
        else:
            probs = [torch.stack(self.saved_log_probs[i]) for i in range(len(rets))]
            probs = torch.stack(probs)

        policy_loss = -probs * rewards / len(rets)
        policy_loss.sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

        # reset variables
        self.saved_log_probs = [] if self.batch else {k: [] for k in range(len(self.ob_rrefs))}
        self.states = torch.zeros(len(self.ob_rrefs), 1, 4)

        # calculate running rewards
        self.running_reward = 0.5 * ep_rewards + 0.5 * self.running_reward
        return ep_rewards, self.running_reward


def run_worker(rank, world_size, n_episode, batch, print_log=True):
    r"""
    This is the entry point for all processes. The rank 0 is the agent. All
    other ranks are observers.
    """
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "29500")  # port: a test runs it on a free port
    if rank == 0:
        # rank0 is the agent
        rpc.init_rpc(AGENT_NAME, rank=rank, world_size=world_size)

        agent = Agent(world_size, batch)
        for i_episode in range(n_episode):
            last_reward, running_reward = agent.run_episode(n_steps=NUM_STEPS)

            if print_log:
                print(
                    f"Episode {i_episode}\tLast reward: {last_reward:.2f}\t"
                    f"Average reward: {running_reward:.2f}",
                    flush=True,
                )
    else:
        # other ranks are the observer
        rpc.init_rpc(OBSERVER_NAME.format(rank), rank=rank, world_size=world_size)
        # observers passively waiting for instructions from agents
    rpc.shutdown()


def main():
    for world_size in range(2, args.max_world_size):
        delays = []
        for batch in [True, False]:
            tik = time.time()
            mp.spawn(
                run_worker, args=(world_size, args.num_episode, batch), nprocs=world_size, join=True
            )
            tok = time.time()
            delays.append(tok - tik)

        print(f"{world_size}, {delays[0]}, {delays[1]}")


if __name__ == "__main__":
    main()
