"""engine runs (end-to-end engine cells, docs/engine.md)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 22:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('engine_runs',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('prompt', sa.String(length=32), nullable=False),
    sa.Column('policy', sa.String(length=16), nullable=False),
    sa.Column('pair_index', sa.Integer(), nullable=True),
    sa.Column('pair_order', sa.String(length=16), nullable=True),
    sa.Column('pair_position', sa.Integer(), nullable=True),
    sa.Column('wall_s', sa.Float(), nullable=True),
    sa.Column('load_s', sa.Float(), nullable=True),
    sa.Column('steady_s', sa.Float(), nullable=True),
    sa.Column('backend_found', sa.Boolean(), nullable=False),
    sa.Column('backend_line', sa.Text(), nullable=True),
    sa.Column('tokens', sa.Integer(), nullable=True),
    sa.Column('output_sha256', sa.String(length=64), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('signal', sa.Integer(), nullable=True),
    sa.Column('timed_out', sa.Boolean(), nullable=False),
    sa.Column('device_bytes', sa.BigInteger(), nullable=True),
    sa.Column('config_sha256', sa.String(length=64), nullable=True),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_engine_runs_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', name=op.f('pk_engine_runs'))
    )
    with op.batch_alter_table('engine_runs', schema=None) as batch_op:
        batch_op.create_index('ix_engine_runs_prompt_pair', ['prompt', 'pair_index'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('engine_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_engine_runs_prompt_pair')

    op.drop_table('engine_runs')
